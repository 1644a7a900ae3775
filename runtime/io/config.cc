// config.json of a llava-hf checkpoint: parsing with transformers' defaults, validation, writing.
#include "runtime/io/config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "runtime/io/json_fields.h"

namespace hap {
namespace {

using Json = nlohmann::json;

constexpr int kMaxImageSize = 4096;  // ClipPreprocess's largest side
// Layers of either tower, at most: far above any released model (LLaMA-70B has 80), and low
// enough that arithmetic on layer indices (feature layer bounds, -(n + 1)) stays inside an int.
constexpr int kMaxLayers = 4096;

using io_internal::Brief;
using io_internal::CheckSupported;
using io_internal::FieldReader;
using io_internal::ShortestDouble;

absl::Status ParseVision(const Json& root, const std::string& source, VisionConfig& v) {
  if (!root.contains("vision_config") || root["vision_config"].is_null()) {
    v = LlavaDefaultVisionConfig();
    return absl::OkStatus();
  }
  v = VisionConfig{};  // a given vision_config starts from CLIPVisionConfig's defaults
  const Json& obj = root["vision_config"];
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": vision_config is a JSON ",
                                                   obj.type_name(), ", expected an object"));
  }
  FieldReader r(obj, source, "vision_config.");
  std::string model_type = "clip_vision_model";
  HAP_RETURN_IF_ERROR(r.String("model_type", model_type));
  HAP_RETURN_IF_ERROR(CheckSupported(r.where(), "model_type", model_type, {"clip_vision_model"}));
  HAP_RETURN_IF_ERROR(r.Int("hidden_size", v.hidden_size));
  HAP_RETURN_IF_ERROR(r.Int("intermediate_size", v.intermediate_size));
  HAP_RETURN_IF_ERROR(r.Int("num_hidden_layers", v.num_hidden_layers));
  HAP_RETURN_IF_ERROR(r.Int("num_attention_heads", v.num_attention_heads));
  HAP_RETURN_IF_ERROR(r.Int("num_channels", v.num_channels));
  HAP_RETURN_IF_ERROR(r.Int("image_size", v.image_size));
  HAP_RETURN_IF_ERROR(r.Int("patch_size", v.patch_size));
  HAP_RETURN_IF_ERROR(r.Int("projection_dim", v.projection_dim));
  HAP_RETURN_IF_ERROR(r.Float("layer_norm_eps", v.layer_norm_eps));
  HAP_RETURN_IF_ERROR(r.String("hidden_act", v.hidden_act));
  return absl::OkStatus();
}

absl::Status ParseText(const Json& root, const std::string& source, TextConfig& t) {
  static const Json kEmpty = Json::object();
  const Json* obj = &kEmpty;
  if (root.contains("text_config") && !root["text_config"].is_null()) {
    obj = &root["text_config"];
    if (!obj->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": text_config is a JSON ",
                                                     obj->type_name(), ", expected an object"));
    }
  }
  FieldReader r(*obj, source, "text_config.");
  FieldReader top(root, source, "");
  std::string model_type = "llama";
  HAP_RETURN_IF_ERROR(r.String("model_type", model_type));
  HAP_RETURN_IF_ERROR(CheckSupported(r.where(), "model_type", model_type, {"llama"}));
  HAP_RETURN_IF_ERROR(r.Int("vocab_size", t.vocab_size));
  HAP_RETURN_IF_ERROR(r.Int("hidden_size", t.hidden_size));
  HAP_RETURN_IF_ERROR(r.Int("intermediate_size", t.intermediate_size));
  HAP_RETURN_IF_ERROR(r.Int("num_hidden_layers", t.num_hidden_layers));
  HAP_RETURN_IF_ERROR(r.Int("num_attention_heads", t.num_attention_heads));
  t.num_key_value_heads = t.num_attention_heads;
  HAP_RETURN_IF_ERROR(r.Int("num_key_value_heads", t.num_key_value_heads));
  HAP_RETURN_IF_ERROR(r.Int("max_position_embeddings", t.max_position_embeddings));
  HAP_RETURN_IF_ERROR(r.TokenId("bos_token_id", t.bos_token_id));
  HAP_RETURN_IF_ERROR(r.TokenId("eos_token_id", t.eos_token_id));
  // llava-hf puts pad_token_id at the top level; text_config's wins when both are given.
  t.pad_token_id = -1;
  HAP_RETURN_IF_ERROR(top.TokenId("pad_token_id", t.pad_token_id));
  HAP_RETURN_IF_ERROR(r.TokenId("pad_token_id", t.pad_token_id));
  HAP_RETURN_IF_ERROR(r.Float("rms_norm_eps", t.rms_norm_eps));
  HAP_RETURN_IF_ERROR(r.String("hidden_act", t.hidden_act));
  // Same precedence for tie_word_embeddings (LlamaConfig's default is untied).
  t.tie_word_embeddings = false;
  HAP_RETURN_IF_ERROR(top.Bool("tie_word_embeddings", t.tie_word_embeddings));
  HAP_RETURN_IF_ERROR(r.Bool("tie_word_embeddings", t.tie_word_embeddings));

  if (t.num_attention_heads <= 0 || t.hidden_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(r.where(), "hidden_size (", t.hidden_size,
                                                   ") and num_attention_heads (",
                                                   t.num_attention_heads, ") must be positive"));
  }
  if (t.hidden_size % t.num_attention_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(r.where(), "num_attention_heads (", t.num_attention_heads,
                     ") must divide hidden_size (", t.hidden_size, ")"));
  }
  t.head_dim = t.hidden_size / t.num_attention_heads;
  HAP_RETURN_IF_ERROR(r.Int("head_dim", t.head_dim));

  // RoPE: transformers 4.x writes rope_theta (+ rope_scaling); 5.x nests it in rope_parameters.
  HAP_RETURN_IF_ERROR(r.Float("rope_theta", t.rope_theta));
  if (r.Has("rope_parameters")) {
    const Json& rp = (*obj)["rope_parameters"];
    if (!rp.is_object()) return r.TypeError("rope_parameters", rp, "an object");
    FieldReader rr(rp, source, "text_config.rope_parameters.");
    std::string rope_type = "default";
    HAP_RETURN_IF_ERROR(rr.String("rope_type", rope_type));
    if (rope_type != "default") {
      return absl::InvalidArgumentError(absl::StrCat(rr.where(), "rope_type '", rope_type,
                                                     "' is not supported (only plain RoPE)"));
    }
    HAP_RETURN_IF_ERROR(rr.Float("rope_theta", t.rope_theta));
  }
  if (r.Has("rope_scaling")) {
    return absl::InvalidArgumentError(absl::StrCat(r.where(), "rope_scaling is not supported (got ",
                                                   Brief((*obj)["rope_scaling"]), ")"));
  }
  return absl::OkStatus();
}

absl::Status Positive(const std::string& where, const char* name, double value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(where, name, " = ", value, " must be positive"));
}

// A tower's num_hidden_layers: positive and at most kMaxLayers.
absl::Status LayerCount(const std::string& where, int layers) {
  HAP_RETURN_IF_ERROR(Positive(where, "num_hidden_layers", layers));
  if (layers <= kMaxLayers) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(where, "num_hidden_layers ", layers, " is over ", kMaxLayers));
}

absl::Status Validate(const LlavaConfig& c, const std::string& source) {
  const std::string vw = absl::StrCat(source, ": vision_config.");
  const VisionConfig& v = c.vision;
  HAP_RETURN_IF_ERROR(Positive(vw, "hidden_size", v.hidden_size));
  HAP_RETURN_IF_ERROR(Positive(vw, "intermediate_size", v.intermediate_size));
  HAP_RETURN_IF_ERROR(LayerCount(vw, v.num_hidden_layers));
  HAP_RETURN_IF_ERROR(Positive(vw, "num_attention_heads", v.num_attention_heads));
  HAP_RETURN_IF_ERROR(Positive(vw, "num_channels", v.num_channels));
  HAP_RETURN_IF_ERROR(Positive(vw, "image_size", v.image_size));
  HAP_RETURN_IF_ERROR(Positive(vw, "patch_size", v.patch_size));
  HAP_RETURN_IF_ERROR(Positive(vw, "projection_dim", v.projection_dim));
  HAP_RETURN_IF_ERROR(Positive(vw, "layer_norm_eps", v.layer_norm_eps));
  if (v.hidden_size % v.num_attention_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(vw, "num_attention_heads (", v.num_attention_heads,
                     ") must divide hidden_size (", v.hidden_size, ")"));
  }
  // ClipPreprocess makes images of at most 4096 px a side; the bound also keeps
  // (image_size / patch_size)^2 inside an int.
  if (v.image_size > kMaxImageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat(vw, "image_size ", v.image_size, " is over ", kMaxImageSize, " pixels"));
  }
  if (v.image_size % v.patch_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(vw, "image_size (", v.image_size,
                                                   ") must be divisible by patch_size (",
                                                   v.patch_size, ")"));
  }
  HAP_RETURN_IF_ERROR(CheckSupported(vw, "hidden_act", v.hidden_act, {"quick_gelu", "gelu"}));

  const std::string tw = absl::StrCat(source, ": text_config.");
  const TextConfig& t = c.text;
  HAP_RETURN_IF_ERROR(Positive(tw, "vocab_size", t.vocab_size));
  HAP_RETURN_IF_ERROR(Positive(tw, "intermediate_size", t.intermediate_size));
  HAP_RETURN_IF_ERROR(LayerCount(tw, t.num_hidden_layers));
  HAP_RETURN_IF_ERROR(Positive(tw, "num_key_value_heads", t.num_key_value_heads));
  HAP_RETURN_IF_ERROR(Positive(tw, "head_dim", t.head_dim));
  HAP_RETURN_IF_ERROR(Positive(tw, "max_position_embeddings", t.max_position_embeddings));
  HAP_RETURN_IF_ERROR(Positive(tw, "rms_norm_eps", t.rms_norm_eps));
  HAP_RETURN_IF_ERROR(Positive(tw, "rope_theta", t.rope_theta));
  if (t.num_attention_heads % t.num_key_value_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(tw, "num_key_value_heads (", t.num_key_value_heads,
                     ") must divide num_attention_heads (", t.num_attention_heads, ")"));
  }
  if (t.head_dim % 2 != 0) {  // RoPE rotates pairs of dimensions
    return absl::InvalidArgumentError(
        absl::StrCat(tw, "head_dim (", t.head_dim, ") must be even for RoPE"));
  }
  HAP_RETURN_IF_ERROR(CheckSupported(tw, "hidden_act", t.hidden_act, {"silu"}));
  for (auto [name, id] : {std::pair<const char*, int>{"bos_token_id", t.bos_token_id},
                          {"eos_token_id", t.eos_token_id}}) {
    if (id < 0 || id >= t.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(tw, name, " = ", id, " is outside [0, ", t.vocab_size, ") (vocab_size)"));
    }
  }
  if (t.pad_token_id < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat(tw, "pad_token_id = ", t.pad_token_id, " must be -1 (none) or an id"));
  }

  const std::string w = absl::StrCat(source, ": ");
  const int n = v.num_hidden_layers;
  if (c.vision_feature_layer < -(n + 1) || c.vision_feature_layer > n) {
    return absl::InvalidArgumentError(
        absl::StrCat(w, "vision_feature_layer = ", c.vision_feature_layer, " is outside [",
                     -(n + 1), ", ", n, "] for a vision tower of ", n, " layers"));
  }
  HAP_RETURN_IF_ERROR(CheckSupported(w, "vision_feature_select_strategy",
                                     c.vision_feature_select_strategy, {"default", "full"}));
  HAP_RETURN_IF_ERROR(CheckSupported(w, "projector_hidden_act", c.projector_hidden_act,
                                     {"gelu", "gelu_pytorch_tanh"}));
  if (c.image_token_index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(w, "image_token_index = ", c.image_token_index, " must be >= 0"));
  }
  HAP_RETURN_IF_ERROR(Positive(w, "image_seq_length", c.image_seq_length));
  return absl::OkStatus();
}

}  // namespace

VisionConfig LlavaDefaultVisionConfig() {
  VisionConfig v;
  v.hidden_size = 1024;
  v.intermediate_size = 4096;
  v.num_hidden_layers = 24;
  v.num_attention_heads = 16;
  v.image_size = 336;
  v.patch_size = 14;
  v.projection_dim = 768;
  return v;
}

int LlavaConfig::num_visual_tokens() const {
  return vision.num_patches() + (vision_feature_select_strategy == "full" ? 1 : 0);
}

int LlavaConfig::vision_layers_used() const {
  return vision_feature_layer >= 0 ? vision_feature_layer
                                   : vision.num_hidden_layers + 1 + vision_feature_layer;
}

absl::StatusOr<LlavaConfig> ParseLlavaConfig(std::string_view json_text,
                                             std::string_view source_view) {
  const std::string source_name(source_view);
  HAP_ASSIGN_OR_RETURN(const Json root, io_internal::ParseJsonObject(json_text, source_name));
  LlavaConfig c;
  FieldReader r(root, source_name, "");
  HAP_RETURN_IF_ERROR(r.Architecture(c.model_type, c.architectures));
  const bool llava_arch = std::find(c.architectures.begin(), c.architectures.end(),
                                    "LlavaForConditionalGeneration") != c.architectures.end();
  if (c.model_type == "qwen2_5_vl") {
    return absl::InvalidArgumentError(absl::StrCat(
        source_name,
        ": a Qwen2.5-VL checkpoint (model_type 'qwen2_5_vl'): `hapctl run` and hap-decode "
        "serve it, this path (hap-encoder, hap-prefill, hapctl eval/explain/dump) does not yet; "
        "supported here: model_type 'llava' (LlavaForConditionalGeneration)"));
  }
  if (c.model_type != "llava" && !llava_arch) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": unsupported architecture: model_type '", c.model_type,
                     "', architectures [", absl::StrJoin(c.architectures, ", "),
                     "]; supported: model_type 'llava' (LlavaForConditionalGeneration)"));
  }

  HAP_RETURN_IF_ERROR(ParseVision(root, source_name, c.vision));
  HAP_RETURN_IF_ERROR(ParseText(root, source_name, c.text));

  // Newer transformers alias image_token_index as image_token_id.
  HAP_RETURN_IF_ERROR(r.Int("image_token_id", c.image_token_index));
  HAP_RETURN_IF_ERROR(r.Int("image_token_index", c.image_token_index));
  if (r.Has("vision_feature_layer") && root["vision_feature_layer"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source_name, ": vision_feature_layer is a list (multi-layer features are not supported)"));
  }
  HAP_RETURN_IF_ERROR(r.Int("vision_feature_layer", c.vision_feature_layer));
  HAP_RETURN_IF_ERROR(r.String("vision_feature_select_strategy", c.vision_feature_select_strategy));
  HAP_RETURN_IF_ERROR(r.String("projector_hidden_act", c.projector_hidden_act));
  HAP_RETURN_IF_ERROR(r.Bool("multimodal_projector_bias", c.projector_bias));
  // Absent, it follows the geometry, which is only known to be sane once validated (a
  // patch_size of 0 would divide by zero).
  const bool seq_given = r.Has("image_seq_length");
  HAP_RETURN_IF_ERROR(r.Int("image_seq_length", c.image_seq_length));
  // transformers 4.56 renamed torch_dtype to dtype; either may be present.
  HAP_RETURN_IF_ERROR(r.String("dtype", c.torch_dtype));
  HAP_RETURN_IF_ERROR(r.String("torch_dtype", c.torch_dtype));
  HAP_RETURN_IF_ERROR(Validate(c, source_name));
  if (!seq_given) c.image_seq_length = c.num_visual_tokens();
  return c;
}

absl::StatusOr<LlavaConfig> LoadLlavaConfig(const std::string& model_dir) {
  return io_internal::LoadConfigJson(model_dir, &ParseLlavaConfig);
}

std::string LlavaConfigToJson(const LlavaConfig& cfg) {
  using OJson = nlohmann::ordered_json;
  const VisionConfig& v = cfg.vision;
  const TextConfig& t = cfg.text;
  OJson vision = {{"model_type", "clip_vision_model"},
                  {"hidden_size", v.hidden_size},
                  {"intermediate_size", v.intermediate_size},
                  {"num_hidden_layers", v.num_hidden_layers},
                  {"num_attention_heads", v.num_attention_heads},
                  {"num_channels", v.num_channels},
                  {"image_size", v.image_size},
                  {"patch_size", v.patch_size},
                  {"projection_dim", v.projection_dim},
                  {"layer_norm_eps", ShortestDouble(v.layer_norm_eps)},
                  {"hidden_act", v.hidden_act}};
  OJson text = {{"model_type", "llama"},
                {"architectures", {"LlamaForCausalLM"}},
                {"vocab_size", t.vocab_size},
                {"hidden_size", t.hidden_size},
                {"intermediate_size", t.intermediate_size},
                {"num_hidden_layers", t.num_hidden_layers},
                {"num_attention_heads", t.num_attention_heads},
                {"num_key_value_heads", t.num_key_value_heads},
                {"head_dim", t.head_dim},
                {"max_position_embeddings", t.max_position_embeddings},
                {"bos_token_id", t.bos_token_id},
                {"eos_token_id", t.eos_token_id},
                {"pad_token_id", t.pad_token_id >= 0 ? OJson(t.pad_token_id) : OJson(nullptr)},
                {"rms_norm_eps", ShortestDouble(t.rms_norm_eps)},
                {"rope_theta", ShortestDouble(t.rope_theta)},
                {"rope_scaling", nullptr},
                {"tie_word_embeddings", t.tie_word_embeddings},
                {"hidden_act", t.hidden_act}};
  OJson root = {{"architectures", {"LlavaForConditionalGeneration"}},
                {"model_type", "llava"},
                {"image_token_index", cfg.image_token_index},
                {"image_seq_length", cfg.image_seq_length},
                {"vision_feature_layer", cfg.vision_feature_layer},
                {"vision_feature_select_strategy", cfg.vision_feature_select_strategy},
                {"projector_hidden_act", cfg.projector_hidden_act},
                {"multimodal_projector_bias", cfg.projector_bias},
                {"pad_token_id", t.pad_token_id >= 0 ? OJson(t.pad_token_id) : OJson(nullptr)},
                {"tie_word_embeddings", t.tie_word_embeddings}};
  if (!cfg.torch_dtype.empty()) root["torch_dtype"] = cfg.torch_dtype;
  root["text_config"] = std::move(text);
  root["vision_config"] = std::move(vision);
  return root.dump(2) + "\n";
}

}  // namespace hap
