// LLaVA-1.5 weights from a llava-hf checkpoint (single or sharded safetensors) as F32 views.
#include "runtime/io/weights.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/string_view_compat.h"
#include "runtime/io/weights_internal.h"

namespace hap {

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
  return absl::InvalidArgumentError(
      absl::StrCat("model parts '", AsAbsl(name), "' is not one of vision, language, all"));
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
  HAP_ASSIGN_OR_RETURN(
      w->checkpoint_,
      io_internal::OpenCheckpoint(model_dir, CanonicalLlavaTensorName, ExpectedLlavaTensors(cfg),
                                  parts, "language_model.", ModelParts::kLanguage));
  Checkpoint& checkpoint = *w->checkpoint_;
  auto matrix = [&](const std::string& name) { return checkpoint.Matrix(name); };
  auto vector = [&](const std::string& name) { return checkpoint.Vector(name); };

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
    w->text_ = io_internal::ReadTextWeights(
        checkpoint, "language_model.model.", "language_model.lm_head.weight",
        cfg.text.num_hidden_layers, cfg.text.tie_word_embeddings, /*qkv_bias=*/false);
  }
  return w;
}

namespace io_internal {

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenCheckpoint(
    const std::string& model_dir, const Checkpoint::CanonicalName& canonical,
    const std::vector<ExpectedTensor>& expected, ModelParts parts, const std::string& prefix,
    ModelParts prefixed_part) {
  const ModelParts other_part =
      prefixed_part == ModelParts::kVision ? ModelParts::kLanguage : ModelParts::kVision;
  auto wanted = [&](std::string_view name) {
    return HasPart(parts, absl::StartsWith(AsAbsl(name), prefix) ? prefixed_part : other_part);
  };
  HAP_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint,
                       Checkpoint::Open(model_dir, canonical));
  HAP_RETURN_IF_ERROR(checkpoint->Check(expected, wanted));
  return checkpoint;
}

TextWeights ReadTextWeights(Checkpoint& c, const std::string& prefix, const std::string& lm_head,
                            int num_layers, bool tie_word_embeddings, bool qkv_bias) {
  TextWeights t;
  t.embed = c.Matrix(prefix + "embed_tokens.weight");
  t.norm = c.Vector(prefix + "norm.weight");
  t.lm_head = tie_word_embeddings ? t.embed : c.Matrix(lm_head);
  for (int i = 0; i < num_layers; ++i) {
    const std::string lp = absl::StrCat(prefix, "layers.", i, ".");
    LlamaLayerWeights l;
    l.attn_norm = c.Vector(lp + "input_layernorm.weight");
    l.q = c.Matrix(lp + "self_attn.q_proj.weight");
    l.k = c.Matrix(lp + "self_attn.k_proj.weight");
    l.v = c.Matrix(lp + "self_attn.v_proj.weight");
    if (qkv_bias) {
      l.q_b = c.Vector(lp + "self_attn.q_proj.bias");
      l.k_b = c.Vector(lp + "self_attn.k_proj.bias");
      l.v_b = c.Vector(lp + "self_attn.v_proj.bias");
    }
    l.o = c.Matrix(lp + "self_attn.o_proj.weight");
    l.mlp_norm = c.Vector(lp + "post_attention_layernorm.weight");
    l.gate = c.Matrix(lp + "mlp.gate_proj.weight");
    l.up = c.Matrix(lp + "mlp.up_proj.weight");
    l.down = c.Matrix(lp + "mlp.down_proj.weight");
    t.layers.push_back(std::move(l));
  }
  return t;
}

}  // namespace io_internal

}  // namespace hap
