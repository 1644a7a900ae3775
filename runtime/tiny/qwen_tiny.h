// Random-weight Qwen2.5-VL checkpoints of any size in the published Hugging Face layout
// (config.json, safetensors, tokenizer.json + tokenizer_config.json with the chat template,
// preprocessor_config.json, chat_template.json, generation_config.json), for `hapctl make-tiny
// --family qwen2.5-vl`, the tests and the benchmarks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/dtype.h"
#include "runtime/io/qwen_config.h"
#include "runtime/tiny/tiny_checkpoint.h"

namespace hap {

struct TinyQwenOptions {
  uint64_t seed = 0;
  int layers = 2;
  int hidden = 64;
  int heads = 4;
  int kv_heads = 2;
  int intermediate = 176;
  // Rotary pairs per axis (temporal, height, width); they must sum to hidden / heads / 2.
  std::vector<int> mrope_section = {2, 3, 3};
  int vision_layers = 4;
  std::vector<int> fullatt_blocks = {1, 3};
  int vision_hidden = 32;
  int vision_heads = 2;
  int vision_intermediate = 64;
  int window_size = 56;  // pixels: 2 x 2 merge units of 2 x 2 patches of 14
  int merges = 400;      // byte-level BPE merges trained on the corpus
  // Pixel budget of the processor: tiny images keep the tests fast.
  int64_t min_pixels = 28 * 28 * 4;
  int64_t max_pixels = 28 * 28 * 64;
  DType dtype = DType::kF32;
  int shards = 1;
  std::string corpus_path;  // data/tokenizer/corpus.txt
  std::function<void(const CheckpointProgress&)> progress;
};

// The config the options describe (also written as config.json); InvalidArgument when it is
// not a valid Qwen2.5-VL config (the parser's message).
absl::StatusOr<Qwen25VLConfig> TinyQwenConfig(const TinyQwenOptions& options, int vocab_size);

// Writes the checkpoint into `dir` (created).
absl::Status WriteTinyQwen25VL(const TinyQwenOptions& options, const std::string& dir);

}  // namespace hap
