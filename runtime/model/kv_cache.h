// A sequence's KV cache. After pruning, layers hold different numbers of tokens: each layer keeps
// exactly the rows it processed, with their original position ids. KvStore is what the decoder
// needs of a cache; KvCache keeps each layer contiguous (prefill, the KV transfer, hapctl), the
// engine's PagedKv keeps it in fixed-size blocks of a shared pool.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "base/dtype.h"
#include "kernels/backend.h"
#include "kernels/op_args.h"

namespace hap {

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual int n_layers() const = 0;
  virtual int len(int layer) const = 0;
  // Appends n rows to `layer`: k, v F32 [n, kv_dim] (RoPE applied to k) in `backend`'s memory,
  // their original positions in host memory.
  virtual absl::Status Append(const Backend& backend, int layer, const float* k, const float* v,
                              const int32_t* positions, int n) = 0;
  // The layer's rows in order, as spans of `dtype()` for Backend::DecodeAttention.
  virtual void Spans(int layer, std::vector<KvSpan>* spans) const = 0;
  virtual DType dtype() const = 0;
  // Where the rows are: a backend decodes only from a cache in its own memory.
  virtual Device device() const = 0;

  // Position id of the next token to decode: the unpruned prompt length, then +1 per token.
  int32_t next_position = 0;
};

struct LayerKv {
  std::vector<float> k;            // F32 [len, kv_dim], RoPE applied
  std::vector<float> v;            // F32 [len, kv_dim]
  std::vector<int32_t> positions;  // [len] original position ids
  int len() const { return static_cast<int>(positions.size()); }
};

// Host memory: the prefill's output, what the KV transfer sends, what hapctl decodes on the CPU.
// Rows appended from a device backend are copied out (one copy per layer of a prefill).
class KvCache : public KvStore {
 public:
  int kv_dim = 0;  // n_kv_heads * head_dim
  std::vector<LayerKv> layers;

  // Bytes of K and V (F32) over all layers; position ids are not counted.
  int64_t bytes() const;
  // Σ_l len(l).
  int64_t total_rows() const;
  void Clear();

  int n_layers() const override { return static_cast<int>(layers.size()); }
  int len(int layer) const override { return layers[layer].len(); }
  absl::Status Append(const Backend& backend, int layer, const float* k, const float* v,
                      const int32_t* positions, int n) override;
  void Spans(int layer, std::vector<KvSpan>* spans) const override;
  DType dtype() const override { return DType::kF32; }
  Device device() const override { return Device::kCpu; }
};

// A cache in a backend's memory, each layer contiguous F32 with room for its rows plus
// `reserve_rows`: how a single sequence decodes on a device backend (hapctl run, the
// in-process pipeline) without a block pool.
class DeviceKv final : public KvStore {
 public:
  // The cache's rows copied into `backend`'s memory, with room for reserve_rows more per layer.
  static absl::StatusOr<std::unique_ptr<DeviceKv>> FromCache(const Backend& backend,
                                                            const KvCache& cache,
                                                            int reserve_rows);

  int n_layers() const override { return static_cast<int>(layers_.size()); }
  int len(int layer) const override { return layers_[layer].len; }
  // FailedPrecondition past the reserved rows.
  absl::Status Append(const Backend& backend, int layer, const float* k, const float* v,
                      const int32_t* positions, int n) override;
  void Spans(int layer, std::vector<KvSpan>* spans) const override;
  DType dtype() const override { return DType::kF32; }
  Device device() const override { return device_; }

 private:
  struct Layer {
    BackendBuffer k, v;  // F32 [capacity, kv_dim]
    int capacity = 0;
    int len = 0;
  };
  DeviceKv() = default;

  int kv_dim_ = 0;
  Device device_ = Device::kCpu;
  std::vector<Layer> layers_;
};

}  // namespace hap
