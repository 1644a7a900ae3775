// config.json of a llava-hf checkpoint: parsing with transformers' defaults for absent keys,
// validation of what this runtime supports, and writing (for `hapctl make-tiny`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace hap {

// CLIP vision tower. Member defaults are CLIPVisionConfig's (used for keys absent from a
// vision_config dict); a config without vision_config gets LlavaConfig's CLIP ViT-L/14-336.
struct VisionConfig {
  int hidden_size = 768;
  int intermediate_size = 3072;
  int num_hidden_layers = 12;
  int num_attention_heads = 12;
  int num_channels = 3;
  int image_size = 224;
  int patch_size = 32;
  int projection_dim = 512;  // unused by LLaVA (no CLIP projection head), kept for round trips
  float layer_norm_eps = 1e-5f;
  std::string hidden_act = "quick_gelu";  // quick_gelu | gelu

  int num_patches() const { return (image_size / patch_size) * (image_size / patch_size); }
};

// LLaMA language model; member defaults are LlamaConfig's. num_key_value_heads and head_dim
// default to num_attention_heads and hidden_size / num_attention_heads.
struct TextConfig {
  int vocab_size = 32000;
  int hidden_size = 4096;
  int intermediate_size = 11008;
  int num_hidden_layers = 32;
  int num_attention_heads = 32;
  int num_key_value_heads = 32;
  int head_dim = 128;
  int max_position_embeddings = 2048;
  int bos_token_id = 1;
  int eos_token_id = 2;
  int pad_token_id = -1;  // -1 if none
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";
  // Multimodal rotary (Qwen2.5-VL's M-RoPE): the frequency pairs given to the temporal, height
  // and width positions, summing to head_dim / 2. Empty for LLaMA's 1-D RoPE; config.json of a
  // LLaVA model never sets it.
  std::vector<int> mrope_section;
};

// The CLIP ViT-L/14 at 336 px that LlavaConfig builds when config.json has no vision_config:
// 1024 / 4096 / 24 layers / 16 heads / 336 px / patch 14 / projection 768.
VisionConfig LlavaDefaultVisionConfig();

// A default-constructed LlavaConfig equals what ParseLlavaConfig makes of {"model_type": "llava"}.
struct LlavaConfig {
  VisionConfig vision = LlavaDefaultVisionConfig();
  TextConfig text;
  int image_token_index = 32000;
  // Index into CLIP's hidden_states (0 = embeddings after pre-LN, i = after layer i, negative
  // counts from the end): -2 is the output of the second-to-last encoder layer.
  int vision_feature_layer = -2;
  std::string vision_feature_select_strategy = "default";  // default (drop CLS) | full
  std::string projector_hidden_act = "gelu";               // gelu | gelu_pytorch_tanh
  bool projector_bias = true;                              // multimodal_projector_bias
  // Visual tokens per image as the processor expands <image>. When absent from config.json it
  // is num_visual_tokens() (transformers' fixed 576 would be wrong for small test models).
  int image_seq_length = 576;
  std::string model_type = "llava";
  std::vector<std::string> architectures = {"LlavaForConditionalGeneration"};
  // The dtype the weights were saved in ("float32", "float16", "bfloat16"), "" when config.json
  // does not say. Informational: the safetensors headers decide how weights are read.
  std::string torch_dtype;

  // (image_size / patch_size)^2, +1 for the CLS token with strategy "full".
  int num_visual_tokens() const;
  // Encoder layers that must run to reach vision_feature_layer: -2 with 24 layers -> 23.
  int vision_layers_used() const;
};

// `source_name` prefixes every error (usually the file's path).
absl::StatusOr<LlavaConfig> ParseLlavaConfig(std::string_view json_text,
                                             std::string_view source_name);
// Reads and parses model_dir/config.json.
absl::StatusOr<LlavaConfig> LoadLlavaConfig(const std::string& model_dir);
// A llava-hf style config.json with every field above written out (pad_token_id both at the top
// level, as llava-hf has it, and in text_config; torch_dtype when set); ParseLlavaConfig reads
// it back to an equal config and tools/pytorch/llava_model.py reads it too.
std::string LlavaConfigToJson(const LlavaConfig& cfg);

}  // namespace hap
