// Deterministic random llava-hf checkpoints (config.json + safetensors) for tests, benchmarks
// and `hapctl make-tiny`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/dtype.h"
#include "runtime/io/config.h"
#include "runtime/io/weights.h"

namespace hap {

// Writes dir/config.json (LlavaConfigToJson, with torch_dtype set to `dtype`'s name) and
// dir/model.safetensors, or with shards > 1
// dir/model-0000K-of-0000N.safetensors + dir/model.safetensors.index.json. Creates `dir`.
// Every tensor of ExpectedLlavaTensors(cfg) is written, optional ones included. Values depend
// only on (seed, tensor name, shape), not on dtype order or sharding, and are scaled so hidden
// states stay O(1) through deep stacks and attention rows are neither uniform nor one-hot:
//   linear / conv weights  N(0, 1/fan_in) * gain (gain 1/sqrt(2 * layers) on residual writers)
//   norm weights           1 + N(0, 0.05);  biases N(0, 0.02);  embeddings N(0, 1)
//
// `progress`, when set, is called after each weights file is written with its name, how many
// files are written of how many, and the weight bytes written so far of the total.
struct CheckpointProgress {
  std::string file;
  int files_done = 0, files = 0;
  uint64_t bytes_done = 0, bytes_total = 0;
};
absl::Status WriteRandomLlavaCheckpoint(
    const LlavaConfig& cfg, const std::string& dir, uint64_t seed, DType dtype, int shards,
    const std::function<void(const CheckpointProgress&)>& progress = nullptr);

// Mean and standard deviation of a tensor's normal initial values.
struct TensorInit {
  double mean = 0.0;
  double stddev = 1.0;
};

// The weights part of the above for any model: every tensor of `tensors` with values from
// init(tensor), seeded by (seed, name), in dir/model.safetensors or `shards` shards plus the
// index (earlier checkpoint files in `dir` removed). InvalidArgument for a shard count outside
// 1..tensors.size().
absl::Status WriteRandomTensors(const std::vector<ExpectedTensor>& tensors,
                                const std::function<TensorInit(const ExpectedTensor&)>& init,
                                const std::string& dir, uint64_t seed, DType dtype, int shards,
                                const std::function<void(const CheckpointProgress&)>& progress);

// transformers' name of the dtype, for config.json's torch_dtype: float32, float16, bfloat16.
const char* TorchDTypeName(DType dtype);

// Writes `text` to `path`; Unavailable naming the path on failure.
absl::Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace hap
