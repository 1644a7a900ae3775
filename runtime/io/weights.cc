// LLaVA-1.5 weights from a llava-hf checkpoint (single or sharded safetensors) as F32 views.
#include "runtime/io/weights.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "base/status_macros.h"
#include "base/string_view_compat.h"

namespace hap {
namespace {

using Json = nlohmann::json;

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

// Where one tensor of the checkpoint lives.
struct Located {
  const SafetensorsFile* file;
  const TensorInfo* info;
};

// Every tensor of the checkpoint by canonical (legacy) name. A name found twice, whether in two
// shards or under both conventions, is an error: which copy to use would be a guess.
absl::Status Register(const SafetensorsFile& file, std::map<std::string, Located>& catalog) {
  for (const TensorInfo& t : file.tensors()) {
    auto [it, inserted] = catalog.emplace(CanonicalLlavaTensorName(t.name), Located{&file, &t});
    if (!inserted) {
      const Located& first = it->second;
      return absl::InvalidArgumentError(absl::StrCat("tensor '", it->first, "' appears twice: as '",
                                                     first.info->name, "' in ", first.file->path(),
                                                     " and as '", t.name, "' in ", file.path()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::UnavailableError(absl::StrCat(path, ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A shard name from the index must be a plain file name inside the model directory.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

// Whether `path` names something. A path the OS cannot even look up (too long, a component that is
// a file) counts as absent: the throwing overload of std::filesystem::exists would abort instead.
bool PathExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec) && !ec;
}

// Opens the shards named by the index and checks the index against them.
absl::Status OpenSharded(const std::string& dir,
                         std::vector<std::unique_ptr<SafetensorsFile>>& files,
                         std::map<std::string, Located>& catalog) {
  const std::string index_path = absl::StrCat(dir, "/", kIndexFile);
  HAP_ASSIGN_OR_RETURN(std::string text, ReadText(index_path));
  Json index;
  try {
    index = Json::parse(text);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": malformed JSON: ", e.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": expected an object with a \"weight_map\" object"));
  }
  if (index.contains("metadata") && !index["metadata"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": \"metadata\" is a JSON ",
                                                   index["metadata"].type_name(),
                                                   ", expected an object"));
  }
  const Json& weight_map = index["weight_map"];
  if (weight_map.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map is empty"));
  }
  std::map<std::string, std::string> shard_of;  // tensor -> shard file name
  for (const auto& [tensor, shard] : weight_map.items()) {
    if (!shard.is_string() || !IsPlainFileName(shard.get<std::string>())) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map['", tensor, "'] is ",
                                                     shard.dump(),
                                                     ", expected a file name in the same folder"));
    }
    shard_of[tensor] = shard.get<std::string>();
  }
  std::map<std::string, const SafetensorsFile*> opened;
  for (const auto& [tensor, shard] : shard_of) {
    if (opened.count(shard)) continue;
    const std::string path = absl::StrCat(dir, "/", shard);
    if (!PathExists(path)) {
      return absl::NotFoundError(absl::StrCat(
          index_path, ": shard '", shard, "' (named for tensor '", tensor, "') does not exist"));
    }
    HAP_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
    HAP_RETURN_IF_ERROR(Register(*file, catalog));
    opened[shard] = file.get();
    files.push_back(std::move(file));
  }
  for (const auto& [tensor, shard] : shard_of) {
    if (opened[shard]->Find(tensor) == nullptr) {
      return absl::NotFoundError(absl::StrCat(index_path, ": tensor '", tensor,
                                              "' is missing from its shard '", shard, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool HasPart(ModelParts parts, ModelParts part) {
  return (static_cast<int>(parts) & static_cast<int>(part)) != 0;
}

std::string_view ModelPartsName(ModelParts parts) {
  switch (parts) {
    case ModelParts::kVision:
      return "vision";
    case ModelParts::kLanguage:
      return "language";
    case ModelParts::kAll:
      return "all";
  }
  return "all";
}

absl::StatusOr<ModelParts> ParseModelParts(std::string_view name) {
  for (ModelParts p : {ModelParts::kVision, ModelParts::kLanguage, ModelParts::kAll}) {
    if (name == ModelPartsName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat("model parts '", AsAbsl(name),
                                                 "' is not one of vision, language, all"));
}

std::string CanonicalLlavaTensorName(std::string_view name) {
  static constexpr std::pair<std::string_view, std::string_view> kPrefixes[] = {
      {"model.language_model.", "language_model.model."},
      {"model.vision_tower.", "vision_tower."},
      {"model.multi_modal_projector.", "multi_modal_projector."},
  };
  for (const auto& [newer, legacy] : kPrefixes) {
    if (absl::StartsWith(AsAbsl(name), AsAbsl(newer))) {
      return absl::StrCat(AsAbsl(legacy), AsAbsl(name.substr(newer.size())));
    }
  }
  if (name == "lm_head.weight") return "language_model.lm_head.weight";
  return std::string(name);
}

std::vector<ExpectedTensor> ExpectedLlavaTensors(const LlavaConfig& cfg) {
  const VisionConfig& v = cfg.vision;
  const TextConfig& t = cfg.text;
  const int64_t dv = v.hidden_size, iv = v.intermediate_size, p = v.patch_size;
  const int64_t dt = t.hidden_size, it = t.intermediate_size, hd = t.head_dim;
  const int used = cfg.vision_layers_used();
  std::vector<ExpectedTensor> out;
  auto add = [&out](std::string name, std::vector<int64_t> shape, bool optional = false) {
    out.push_back({std::move(name), std::move(shape), optional});
  };

  const std::string vp = "vision_tower.vision_model.";
  add(vp + "embeddings.patch_embedding.weight", {dv, v.num_channels, p, p});
  add(vp + "embeddings.class_embedding", {dv});
  add(vp + "embeddings.position_embedding.weight", {v.num_patches() + 1, dv});
  for (const char* n : {"weight", "bias"}) {
    add(vp + "pre_layrnorm." + n, {dv});
    add(vp + "post_layernorm." + n, {dv}, /*optional=*/true);  // LLaVA reads pre-post-LN states
  }
  for (int i = 0; i < v.num_hidden_layers; ++i) {
    const std::string lp = absl::StrCat(vp, "encoder.layers.", i, ".");
    const bool unused = i >= used;
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      add(absl::StrCat(lp, "self_attn.", proj, ".weight"), {dv, dv}, unused);
      add(absl::StrCat(lp, "self_attn.", proj, ".bias"), {dv}, unused);
    }
    for (const char* ln : {"layer_norm1", "layer_norm2"}) {
      add(absl::StrCat(lp, ln, ".weight"), {dv}, unused);
      add(absl::StrCat(lp, ln, ".bias"), {dv}, unused);
    }
    add(lp + "mlp.fc1.weight", {iv, dv}, unused);
    add(lp + "mlp.fc1.bias", {iv}, unused);
    add(lp + "mlp.fc2.weight", {dv, iv}, unused);
    add(lp + "mlp.fc2.bias", {dv}, unused);
  }

  add("multi_modal_projector.linear_1.weight", {dt, dv});
  if (cfg.projector_bias) add("multi_modal_projector.linear_1.bias", {dt});
  add("multi_modal_projector.linear_2.weight", {dt, dt});
  if (cfg.projector_bias) add("multi_modal_projector.linear_2.bias", {dt});

  const std::string tp = "language_model.model.";
  const int64_t q_out = int64_t{t.num_attention_heads} * hd;
  const int64_t kv_out = int64_t{t.num_key_value_heads} * hd;
  add(tp + "embed_tokens.weight", {t.vocab_size, dt});
  add(tp + "norm.weight", {dt});
  for (int i = 0; i < t.num_hidden_layers; ++i) {
    const std::string lp = absl::StrCat(tp, "layers.", i, ".");
    add(lp + "self_attn.q_proj.weight", {q_out, dt});
    add(lp + "self_attn.k_proj.weight", {kv_out, dt});
    add(lp + "self_attn.v_proj.weight", {kv_out, dt});
    add(lp + "self_attn.o_proj.weight", {dt, q_out});
    add(lp + "mlp.gate_proj.weight", {it, dt});
    add(lp + "mlp.up_proj.weight", {it, dt});
    add(lp + "mlp.down_proj.weight", {dt, it});
    add(lp + "input_layernorm.weight", {dt});
    add(lp + "post_attention_layernorm.weight", {dt});
  }
  if (!t.tie_word_embeddings) add("language_model.lm_head.weight", {t.vocab_size, dt});
  return out;
}

LlavaWeights::~LlavaWeights() = default;

absl::StatusOr<std::unique_ptr<LlavaWeights>> LlavaWeights::Load(const std::string& model_dir,
                                                                 const LlavaConfig& cfg,
                                                                 ModelParts parts) {
  std::unique_ptr<LlavaWeights> w(new LlavaWeights);
  w->parts_ = parts;
  // Tensors of the language model start with language_model.; the rest (vision tower and
  // projector) are the vision part.
  auto wanted = [&](std::string_view name) {
    return HasPart(parts, absl::StartsWith(AsAbsl(name), "language_model.") ? ModelParts::kLanguage
                                                                             : ModelParts::kVision);
  };
  std::map<std::string, Located> catalog;
  const std::string single_path = absl::StrCat(model_dir, "/", kSingleFile);
  std::string source;  // names the checkpoint in "missing tensor" errors
  if (PathExists(absl::StrCat(model_dir, "/", kIndexFile))) {
    source = absl::StrCat(model_dir, "/", kIndexFile);
    HAP_RETURN_IF_ERROR(OpenSharded(model_dir, w->files_, catalog));
  } else if (PathExists(single_path)) {
    source = single_path;
    HAP_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(single_path));
    HAP_RETURN_IF_ERROR(Register(*file, catalog));
    w->files_.push_back(std::move(file));
  } else {
    return absl::NotFoundError(
        absl::StrCat(model_dir, ": neither ", kSingleFile, " nor ", kIndexFile, " exists"));
  }
  for (const auto& f : w->files_) w->mapped_bytes_ += static_cast<int64_t>(f->file_size());

  // Presence and shape of every tensor, before any conversion work.
  for (const ExpectedTensor& e : ExpectedLlavaTensors(cfg)) {
    if (!wanted(e.name)) continue;
    auto it = catalog.find(e.name);
    if (it == catalog.end()) {
      if (e.optional) continue;
      return absl::NotFoundError(
          absl::StrCat(source, ": tensor '", e.name, "' ", ShapeString(e.shape), " is missing"));
    }
    const TensorInfo& info = *it->second.info;
    if (info.shape != e.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(it->second.file->path(), ": tensor '", info.name, "': shape ",
                       ShapeString(info.shape), ", expected ", ShapeString(e.shape)));
    }
  }

  // View of one tensor (already validated above; absent -> null data). Matrices (`stored`) are
  // used in place in their stored dtype; other tensors become F32, in place when they are F32
  // and aligned, else in an owned buffer.
  auto take = [&](const std::string& name, bool stored) -> Weight {
    auto it = catalog.find(name);
    if (it == catalog.end()) return Weight{};
    const SafetensorsFile& file = *it->second.file;
    const TensorInfo& info = *it->second.info;
    Weight weight;
    weight.shape = info.shape;
    weight.dtype = info.dtype;
    const uint8_t* src = file.Data(info);
    w->stored_bytes_ += weight.bytes();
    const bool aligned_f32 =
        info.dtype == DType::kF32 && reinterpret_cast<uintptr_t>(src) % alignof(float) == 0;
    if (aligned_f32 || (stored && info.dtype != DType::kF32)) {
      weight.data = src;
      return weight;
    }
    const int64_t n = info.numel();
    auto buffer = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(n));
    ConvertToF32(info.dtype, src, buffer.get(), static_cast<size_t>(n));
    weight.data = buffer.get();
    weight.dtype = DType::kF32;
    w->converted_bytes_ += n * static_cast<int64_t>(sizeof(float));
    w->owned_.push_back(std::move(buffer));
    return weight;
  };
  auto matrix = [&](const std::string& name) { return take(name, /*stored=*/true); };
  auto vector = [&](const std::string& name) { return take(name, /*stored=*/false); };

  if (HasPart(parts, ModelParts::kVision)) {
    const std::string vp = "vision_tower.vision_model.";
    VisionWeights& vis = w->vision_;
    vis.patch_w = vector(vp + "embeddings.patch_embedding.weight");
    vis.class_emb = vector(vp + "embeddings.class_embedding");
    vis.pos_emb = vector(vp + "embeddings.position_embedding.weight");
    vis.pre_ln_w = vector(vp + "pre_layrnorm.weight");
    vis.pre_ln_b = vector(vp + "pre_layrnorm.bias");
    for (int i = 0; i < cfg.vision_layers_used(); ++i) {
      const std::string lp = absl::StrCat(vp, "encoder.layers.", i, ".");
      ClipLayerWeights l;
      l.ln1_w = vector(lp + "layer_norm1.weight");
      l.ln1_b = vector(lp + "layer_norm1.bias");
      l.q_w = matrix(lp + "self_attn.q_proj.weight");
      l.q_b = vector(lp + "self_attn.q_proj.bias");
      l.k_w = matrix(lp + "self_attn.k_proj.weight");
      l.k_b = vector(lp + "self_attn.k_proj.bias");
      l.v_w = matrix(lp + "self_attn.v_proj.weight");
      l.v_b = vector(lp + "self_attn.v_proj.bias");
      l.o_w = matrix(lp + "self_attn.out_proj.weight");
      l.o_b = vector(lp + "self_attn.out_proj.bias");
      l.ln2_w = vector(lp + "layer_norm2.weight");
      l.ln2_b = vector(lp + "layer_norm2.bias");
      l.fc1_w = matrix(lp + "mlp.fc1.weight");
      l.fc1_b = vector(lp + "mlp.fc1.bias");
      l.fc2_w = matrix(lp + "mlp.fc2.weight");
      l.fc2_b = vector(lp + "mlp.fc2.bias");
      vis.layers.push_back(std::move(l));
    }

    ProjectorWeights& proj = w->projector_;
    proj.l1_w = matrix("multi_modal_projector.linear_1.weight");
    proj.l2_w = matrix("multi_modal_projector.linear_2.weight");
    if (cfg.projector_bias) {  // a stray bias in a bias-free config is not used
      proj.l1_b = vector("multi_modal_projector.linear_1.bias");
      proj.l2_b = vector("multi_modal_projector.linear_2.bias");
    }
  }

  if (HasPart(parts, ModelParts::kLanguage)) {
    const std::string tp = "language_model.model.";
    TextWeights& txt = w->text_;
    txt.embed = matrix(tp + "embed_tokens.weight");
    txt.norm = vector(tp + "norm.weight");
    txt.lm_head = cfg.text.tie_word_embeddings ? txt.embed : matrix("language_model.lm_head.weight");
    for (int i = 0; i < cfg.text.num_hidden_layers; ++i) {
      const std::string lp = absl::StrCat(tp, "layers.", i, ".");
      LlamaLayerWeights l;
      l.attn_norm = vector(lp + "input_layernorm.weight");
      l.q = matrix(lp + "self_attn.q_proj.weight");
      l.k = matrix(lp + "self_attn.k_proj.weight");
      l.v = matrix(lp + "self_attn.v_proj.weight");
      l.o = matrix(lp + "self_attn.o_proj.weight");
      l.mlp_norm = vector(lp + "post_attention_layernorm.weight");
      l.gate = matrix(lp + "mlp.gate_proj.weight");
      l.up = matrix(lp + "mlp.up_proj.weight");
      l.down = matrix(lp + "mlp.down_proj.weight");
      txt.layers.push_back(std::move(l));
    }
  }
  return w;
}

}  // namespace hap
