// config.json of a Qwen2.5-VL checkpoint (model_type "qwen2_5_vl"), in both layouts
// transformers has written: the text model's keys at the top level (the published
// Qwen/Qwen2.5-VL-*-Instruct files) or nested in text_config (transformers >= 4.53), with RoPE as
// rope_theta + rope_scaling {"type": "mrope", "mrope_section"} or rope_parameters (5.x).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/io/config.h"

namespace hap {

// The vision tower; member defaults are Qwen2_5_VLVisionConfig's.
struct Qwen25VLVisionConfig {
  int depth = 32;
  int hidden_size = 3584;
  int intermediate_size = 3420;
  int num_heads = 16;
  int in_channels = 3;
  int patch_size = 14;
  int spatial_merge_size = 2;
  int temporal_patch_size = 2;
  int window_size = 112;  // pixels per side of an attention window
  int out_hidden_size = 3584;
  int tokens_per_second = 4;  // video only
  std::vector<int> fullatt_block_indexes = {7, 15, 23, 31};
  std::string hidden_act = "silu";

  int head_dim() const { return hidden_size / num_heads; }
  // Merged patches per side of a window: window_size / patch_size / spatial_merge_size.
  int window_merged_side() const { return window_size / patch_size / spatial_merge_size; }
};

// The Qwen2 language model; member defaults are Qwen2_5_VLTextConfig's.
struct Qwen25VLTextConfig {
  int vocab_size = 152064;
  int hidden_size = 8192;
  int intermediate_size = 29568;
  int num_hidden_layers = 80;
  int num_attention_heads = 64;
  int num_key_value_heads = 8;
  int max_position_embeddings = 32768;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 1000000.0f;
  // Rotary frequency pairs given to the temporal, height and width positions; they sum to
  // head_dim / 2.
  std::vector<int> mrope_section = {16, 24, 24};
  bool tie_word_embeddings = false;
  int bos_token_id = 151643;
  int eos_token_id = 151645;
  std::string hidden_act = "silu";

  int head_dim() const { return hidden_size / num_attention_heads; }
};

struct Qwen25VLConfig {
  Qwen25VLVisionConfig vision;
  Qwen25VLTextConfig text;
  int image_token_id = 151655;
  int video_token_id = 151656;
  int vision_start_token_id = 151652;
  int vision_end_token_id = 151653;
  std::string model_type = "qwen2_5_vl";
  std::vector<std::string> architectures = {"Qwen2_5_VLForConditionalGeneration"};
  std::string torch_dtype;  // as LlavaConfig::torch_dtype
};

// Whether config.json text names a Qwen2.5-VL model (model_type or architectures), so a
// loader can pick the parser; false for anything else, malformed JSON included.
bool IsQwen25VLConfig(std::string_view json_text);

// Errors are InvalidArgument, start with `source_name`, and name the key path and what was
// expected. Refused: sliding-window attention (use_sliding_window true), activations other
// than silu, an mrope_section that does not cover head_dim, a merger width other than the
// text model's, windows that are not whole merged patches.
absl::StatusOr<Qwen25VLConfig> ParseQwen25VLConfig(std::string_view json_text,
                                                   std::string_view source_name);
absl::StatusOr<Qwen25VLConfig> LoadQwen25VLConfig(const std::string& model_dir);
// Whether model_dir/config.json names a Qwen2.5-VL model (false when it is missing or
// malformed: the family's own loader then says what is wrong).
bool IsQwen25VLDirectory(const std::string& model_dir);

// The decoder's view of the language model (LlamaDecoder): Qwen2 is LLaMA's layer with q, k and
// v biases (the weights carry them) and M-RoPE (mrope_section); no pad token.
TextConfig DecoderTextConfig(const Qwen25VLConfig& config);

// The flat layout of the published checkpoints, every field above written out;
// ParseQwen25VLConfig reads it back to an equal config.
std::string Qwen25VLConfigToJson(const Qwen25VLConfig& config);

}  // namespace hap
