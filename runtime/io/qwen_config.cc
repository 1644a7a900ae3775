// config.json of Qwen2.5-VL: both layouts read into Qwen25VLConfig, validated, written back.
#include "runtime/io/qwen_config.h"

#include <algorithm>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "runtime/io/json_fields.h"

namespace hap {
namespace {

using Json = nlohmann::json;
using io_internal::Brief;
using io_internal::CheckSupported;
using io_internal::FieldReader;
using io_internal::ShortestDouble;

// The same bounds as the LLaVA reader: past these a file is a mistake, not a model.
constexpr int kMaxLayers = 1024;
constexpr int kMaxWidth = 1 << 16;

absl::Status InRange(const std::string& where, const char* name, int64_t value, int64_t lo,
                     int64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(where, name, " = ", value, " is outside ", lo, "..", hi));
}

absl::Status ParseVision(const Json& root, const std::string& source, Qwen25VLVisionConfig& v) {
  if (!root.contains("vision_config") || !root["vision_config"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": vision_config is missing or not an object"));
  }
  const Json& obj = root["vision_config"];
  FieldReader r(obj, source, "vision_config.");
  HAP_RETURN_IF_ERROR(r.Int("depth", v.depth));
  HAP_RETURN_IF_ERROR(r.Int("hidden_size", v.hidden_size));
  HAP_RETURN_IF_ERROR(r.Int("intermediate_size", v.intermediate_size));
  HAP_RETURN_IF_ERROR(r.Int("num_heads", v.num_heads));
  // The published files say in_chans; transformers' attribute is in_channels.
  HAP_RETURN_IF_ERROR(r.Int("in_chans", v.in_channels));
  HAP_RETURN_IF_ERROR(r.Int("in_channels", v.in_channels));
  // transformers reads patch_size; the published files' spatial_patch_size repeats it unread.
  HAP_RETURN_IF_ERROR(r.Int("patch_size", v.patch_size));
  HAP_RETURN_IF_ERROR(r.Int("spatial_merge_size", v.spatial_merge_size));
  HAP_RETURN_IF_ERROR(r.Int("temporal_patch_size", v.temporal_patch_size));
  HAP_RETURN_IF_ERROR(r.Int("window_size", v.window_size));
  HAP_RETURN_IF_ERROR(r.Int("out_hidden_size", v.out_hidden_size));
  HAP_RETURN_IF_ERROR(r.Int("tokens_per_second", v.tokens_per_second));
  HAP_RETURN_IF_ERROR(r.IntList("fullatt_block_indexes", v.fullatt_block_indexes));
  HAP_RETURN_IF_ERROR(r.String("hidden_act", v.hidden_act));

  const std::string& w = r.where();
  HAP_RETURN_IF_ERROR(InRange(w, "depth", v.depth, 1, kMaxLayers));
  HAP_RETURN_IF_ERROR(InRange(w, "hidden_size", v.hidden_size, 1, kMaxWidth));
  HAP_RETURN_IF_ERROR(InRange(w, "intermediate_size", v.intermediate_size, 1, 4 * kMaxWidth));
  HAP_RETURN_IF_ERROR(InRange(w, "num_heads", v.num_heads, 1, v.hidden_size));
  HAP_RETURN_IF_ERROR(InRange(w, "in_chans", v.in_channels, 3, 3));
  HAP_RETURN_IF_ERROR(InRange(w, "patch_size", v.patch_size, 1, 64));
  HAP_RETURN_IF_ERROR(InRange(w, "spatial_merge_size", v.spatial_merge_size, 1, 8));
  HAP_RETURN_IF_ERROR(InRange(w, "temporal_patch_size", v.temporal_patch_size, 1, 16));
  HAP_RETURN_IF_ERROR(InRange(w, "out_hidden_size", v.out_hidden_size, 1, kMaxWidth));
  if (v.hidden_size % v.num_heads != 0 || v.head_dim() % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        w, "num_heads ", v.num_heads, " must divide hidden_size ", v.hidden_size,
        " into heads whose width is a multiple of 4 (the 2-D rotary splits it in height and "
        "width halves of rotated pairs)"));
  }
  const int merged_patch = v.patch_size * v.spatial_merge_size;
  if (v.window_size <= 0 || v.window_size % merged_patch != 0) {
    return absl::InvalidArgumentError(absl::StrCat(w, "window_size ", v.window_size,
                                                   " must be a positive multiple of patch_size * "
                                                   "spatial_merge_size = ",
                                                   merged_patch,
                                                   " (windows are whole merged patches)"));
  }
  for (int i : v.fullatt_block_indexes) {
    if (i < 0 || i >= v.depth) {
      return absl::InvalidArgumentError(
          absl::StrCat(w, "fullatt_block_indexes [", absl::StrJoin(v.fullatt_block_indexes, ", "),
                       "] holds ", i, ", outside the ", v.depth, " blocks"));
    }
  }
  HAP_RETURN_IF_ERROR(CheckSupported(w, "hidden_act", v.hidden_act, {"silu"}));
  return absl::OkStatus();
}

// RoPE keys of the text model: rope_theta, and mrope_section from rope_scaling (4.x) or
// rope_parameters (5.x).
absl::Status ParseRope(const Json& obj, const FieldReader& r, const std::string& source,
                       const std::string& prefix, Qwen25VLTextConfig& t) {
  HAP_RETURN_IF_ERROR(r.Float("rope_theta", t.rope_theta));
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!r.Has(key)) continue;
    const Json& rp = obj[key];
    if (!rp.is_object()) return r.TypeError(key, rp, "an object");
    FieldReader rr(rp, source, absl::StrCat(prefix, key, ".").c_str());
    // "mrope" in the published files; transformers later rewrote it as "default" with the
    // section kept beside it.
    std::string type = "default";
    HAP_RETURN_IF_ERROR(rr.String("type", type));
    HAP_RETURN_IF_ERROR(rr.String("rope_type", type));
    HAP_RETURN_IF_ERROR(CheckSupported(rr.where(), "type", type, {"mrope", "default"}));
    HAP_RETURN_IF_ERROR(rr.IntList("mrope_section", t.mrope_section));
    HAP_RETURN_IF_ERROR(rr.Float("rope_theta", t.rope_theta));
  }
  return absl::OkStatus();
}

absl::Status ParseText(const Json& root, const std::string& source, Qwen25VLTextConfig& t) {
  // transformers builds the text config from text_config when the file has one, else from the
  // top-level keys (the published layout).
  const bool nested = root.contains("text_config") && !root["text_config"].is_null();
  if (nested && !root["text_config"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": text_config is a JSON ",
                                                   root["text_config"].type_name(),
                                                   ", expected an object"));
  }
  const Json& obj = nested ? root["text_config"] : root;
  const std::string prefix = nested ? "text_config." : "";
  FieldReader r(obj, source, prefix.c_str());
  HAP_RETURN_IF_ERROR(r.Int("vocab_size", t.vocab_size));
  HAP_RETURN_IF_ERROR(r.Int("hidden_size", t.hidden_size));
  HAP_RETURN_IF_ERROR(r.Int("intermediate_size", t.intermediate_size));
  HAP_RETURN_IF_ERROR(r.Int("num_hidden_layers", t.num_hidden_layers));
  HAP_RETURN_IF_ERROR(r.Int("num_attention_heads", t.num_attention_heads));
  HAP_RETURN_IF_ERROR(r.Int("num_key_value_heads", t.num_key_value_heads));
  HAP_RETURN_IF_ERROR(r.Int("max_position_embeddings", t.max_position_embeddings));
  HAP_RETURN_IF_ERROR(r.Float("rms_norm_eps", t.rms_norm_eps));
  HAP_RETURN_IF_ERROR(r.String("hidden_act", t.hidden_act));
  HAP_RETURN_IF_ERROR(r.TokenId("bos_token_id", t.bos_token_id));
  HAP_RETURN_IF_ERROR(r.TokenId("eos_token_id", t.eos_token_id));
  // tie_word_embeddings: the top level's, then text_config's.
  HAP_RETURN_IF_ERROR(
      FieldReader(root, source, "").Bool("tie_word_embeddings", t.tie_word_embeddings));
  HAP_RETURN_IF_ERROR(r.Bool("tie_word_embeddings", t.tie_word_embeddings));
  HAP_RETURN_IF_ERROR(ParseRope(obj, r, source, prefix, t));
  bool sliding = false;
  HAP_RETURN_IF_ERROR(r.Bool("use_sliding_window", sliding));
  if (sliding) {
    return absl::InvalidArgumentError(absl::StrCat(
        r.where(), "use_sliding_window is true; sliding-window attention is not supported"));
  }

  const std::string& w = r.where();
  HAP_RETURN_IF_ERROR(InRange(w, "vocab_size", t.vocab_size, 1, 1 << 24));
  HAP_RETURN_IF_ERROR(InRange(w, "hidden_size", t.hidden_size, 1, kMaxWidth));
  HAP_RETURN_IF_ERROR(InRange(w, "intermediate_size", t.intermediate_size, 1, 4 * kMaxWidth));
  HAP_RETURN_IF_ERROR(InRange(w, "num_hidden_layers", t.num_hidden_layers, 1, kMaxLayers));
  HAP_RETURN_IF_ERROR(InRange(w, "num_attention_heads", t.num_attention_heads, 1, t.hidden_size));
  HAP_RETURN_IF_ERROR(
      InRange(w, "num_key_value_heads", t.num_key_value_heads, 1, t.num_attention_heads));
  HAP_RETURN_IF_ERROR(InRange(w, "max_position_embeddings", t.max_position_embeddings, 1, 1 << 24));
  if (t.hidden_size % t.num_attention_heads != 0 ||
      t.num_attention_heads % t.num_key_value_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        w, "num_attention_heads ", t.num_attention_heads, " must divide hidden_size ",
        t.hidden_size, " and be a multiple of num_key_value_heads ", t.num_key_value_heads));
  }
  if (!(t.rms_norm_eps > 0) || !(t.rope_theta > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(w, "rms_norm_eps and rope_theta must be positive"));
  }
  const int pairs = std::accumulate(t.mrope_section.begin(), t.mrope_section.end(), 0);
  const bool sections_ok =
      t.mrope_section.size() == 3 &&
      std::all_of(t.mrope_section.begin(), t.mrope_section.end(), [](int s) { return s >= 0; });
  if (!sections_ok || pairs * 2 != t.head_dim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        w, "mrope_section [", absl::StrJoin(t.mrope_section, ", "),
        "] must be 3 non-negative counts of rotary pairs (temporal, height, width) that sum to "
        "head_dim / 2 = ",
        t.head_dim() / 2));
  }
  HAP_RETURN_IF_ERROR(CheckSupported(w, "hidden_act", t.hidden_act, {"silu"}));
  return absl::OkStatus();
}

bool NamesQwen25VL(const Json& root) {
  if (root.value("model_type", std::string()) == "qwen2_5_vl") return true;
  if (!root.contains("architectures") || !root["architectures"].is_array()) return false;
  for (const Json& a : root["architectures"]) {
    if (a.is_string() && a.get<std::string>() == "Qwen2_5_VLForConditionalGeneration") return true;
  }
  return false;
}

}  // namespace

bool IsQwen25VLConfig(std::string_view json_text) {
  const Json root = Json::parse(json_text.begin(), json_text.end(), nullptr, false);
  return !root.is_discarded() && root.is_object() && NamesQwen25VL(root);
}

absl::StatusOr<Qwen25VLConfig> ParseQwen25VLConfig(std::string_view json_text,
                                                   std::string_view source_view) {
  const std::string source(source_view);
  HAP_ASSIGN_OR_RETURN(const Json root, io_internal::ParseJsonObject(json_text, source));
  Qwen25VLConfig c;
  FieldReader r(root, source, "");
  HAP_RETURN_IF_ERROR(r.Architecture(c.model_type, c.architectures));
  if (!NamesQwen25VL(root)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": model_type '", c.model_type, "', architectures [",
        absl::StrJoin(c.architectures, ", "),
        "] is not Qwen2.5-VL (model_type 'qwen2_5_vl', Qwen2_5_VLForConditionalGeneration)"));
  }
  HAP_RETURN_IF_ERROR(ParseVision(root, source, c.vision));
  HAP_RETURN_IF_ERROR(ParseText(root, source, c.text));
  HAP_RETURN_IF_ERROR(r.Int("image_token_id", c.image_token_id));
  HAP_RETURN_IF_ERROR(r.Int("video_token_id", c.video_token_id));
  HAP_RETURN_IF_ERROR(r.Int("vision_start_token_id", c.vision_start_token_id));
  HAP_RETURN_IF_ERROR(r.Int("vision_end_token_id", c.vision_end_token_id));
  HAP_RETURN_IF_ERROR(r.String("dtype", c.torch_dtype));
  HAP_RETURN_IF_ERROR(r.String("torch_dtype", c.torch_dtype));
  for (const auto& [name, id] : {std::pair{"image_token_id", c.image_token_id},
                                 std::pair{"video_token_id", c.video_token_id},
                                 std::pair{"vision_start_token_id", c.vision_start_token_id},
                                 std::pair{"vision_end_token_id", c.vision_end_token_id}}) {
    HAP_RETURN_IF_ERROR(InRange(absl::StrCat(source, ": "), name, id, 0, c.text.vocab_size - 1));
  }
  if (c.vision.out_hidden_size != c.text.hidden_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": vision_config.out_hidden_size ", c.vision.out_hidden_size,
                     " must equal the text model's hidden_size ", c.text.hidden_size,
                     " (the merger writes into the text embeddings)"));
  }
  return c;
}

absl::StatusOr<Qwen25VLConfig> LoadQwen25VLConfig(const std::string& model_dir) {
  return io_internal::LoadConfigJson(model_dir, &ParseQwen25VLConfig);
}

std::string Qwen25VLConfigToJson(const Qwen25VLConfig& c) {
  const Qwen25VLVisionConfig& v = c.vision;
  const Qwen25VLTextConfig& t = c.text;
  Json vision = {{"depth", v.depth},
                 {"fullatt_block_indexes", v.fullatt_block_indexes},
                 {"hidden_act", v.hidden_act},
                 {"hidden_size", v.hidden_size},
                 {"in_chans", v.in_channels},
                 {"intermediate_size", v.intermediate_size},
                 {"model_type", "qwen2_5_vl"},
                 {"num_heads", v.num_heads},
                 {"out_hidden_size", v.out_hidden_size},
                 {"patch_size", v.patch_size},
                 {"spatial_merge_size", v.spatial_merge_size},
                 {"spatial_patch_size", v.patch_size},
                 {"temporal_patch_size", v.temporal_patch_size},
                 {"tokens_per_second", v.tokens_per_second},
                 {"window_size", v.window_size}};
  Json root = {{"architectures", c.architectures},
               {"attention_dropout", 0.0},
               {"bos_token_id", t.bos_token_id},
               {"eos_token_id", t.eos_token_id},
               {"hidden_act", t.hidden_act},
               {"hidden_size", t.hidden_size},
               {"image_token_id", c.image_token_id},
               {"intermediate_size", t.intermediate_size},
               {"max_position_embeddings", t.max_position_embeddings},
               {"model_type", c.model_type},
               {"num_attention_heads", t.num_attention_heads},
               {"num_hidden_layers", t.num_hidden_layers},
               {"num_key_value_heads", t.num_key_value_heads},
               {"rms_norm_eps", ShortestDouble(t.rms_norm_eps)},
               {"rope_scaling", {{"mrope_section", t.mrope_section}, {"type", "mrope"}}},
               {"rope_theta", ShortestDouble(t.rope_theta)},
               {"tie_word_embeddings", t.tie_word_embeddings},
               {"use_sliding_window", false},
               {"video_token_id", c.video_token_id},
               {"vision_config", std::move(vision)},
               {"vision_end_token_id", c.vision_end_token_id},
               {"vision_start_token_id", c.vision_start_token_id},
               {"vocab_size", t.vocab_size}};
  if (!c.torch_dtype.empty()) root["torch_dtype"] = c.torch_dtype;
  return root.dump(2) + "\n";
}

bool IsQwen25VLDirectory(const std::string& model_dir) {
  absl::StatusOr<std::string> text = ReadFileToString(model_dir + "/config.json");
  return text.ok() && IsQwen25VLConfig(*text);
}

TextConfig DecoderTextConfig(const Qwen25VLConfig& config) {
  const Qwen25VLTextConfig& q = config.text;
  return TextConfig{.vocab_size = q.vocab_size,
                    .hidden_size = q.hidden_size,
                    .intermediate_size = q.intermediate_size,
                    .num_hidden_layers = q.num_hidden_layers,
                    .num_attention_heads = q.num_attention_heads,
                    .num_key_value_heads = q.num_key_value_heads,
                    .head_dim = q.head_dim(),
                    .max_position_embeddings = q.max_position_embeddings,
                    .bos_token_id = q.bos_token_id,
                    .eos_token_id = q.eos_token_id,
                    .pad_token_id = -1,
                    .rms_norm_eps = q.rms_norm_eps,
                    .rope_theta = q.rope_theta,
                    .tie_word_embeddings = q.tie_word_embeddings,
                    .hidden_act = q.hidden_act,
                    .mrope_section = q.mrope_section};
}

}  // namespace hap
