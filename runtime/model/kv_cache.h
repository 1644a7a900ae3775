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

// One layer's rows in the cache's dtype: an F32 cache fills k and v, a BF16 cache k_bf16 and
// v_bf16 (the other pair stays empty).
struct LayerKv {
  std::vector<float> k;            // F32 [len, kv_dim], RoPE applied
  std::vector<float> v;            // F32 [len, kv_dim]
  std::vector<uint16_t> k_bf16;    // BF16 [len, kv_dim], RoPE applied
  std::vector<uint16_t> v_bf16;    // BF16 [len, kv_dim]
  std::vector<int32_t> positions;  // [len] original position ids
  int len() const { return static_cast<int>(positions.size()); }
};

// Host memory: the prefill's output, what the KV transfer sends, what hapctl decodes on the CPU.
// Rows appended from a device backend are copied out (one copy per layer of a prefill). The rows
// are F32 (the default) or BF16: appended F32 rows are then rounded to nearest even as
// Backend::StoreF32As rounds them into a BF16 KvBlockPool, so both hold the same bits.
class KvCache : public KvStore {
 public:
  int kv_dim = 0;  // n_kv_heads * head_dim
  std::vector<LayerKv> layers;

  // The dtype of the rows: InvalidArgument for one other than F32 or BF16, FailedPrecondition
  // once the cache holds rows. Clear keeps it.
  absl::Status SetDType(DType dtype);
  // Bytes of K and V (in dtype()) over all layers; position ids are not counted.
  int64_t bytes() const;
  // Bytes of one row of K (or of V).
  int64_t row_bytes() const { return kv_dim * static_cast<int64_t>(DTypeSize(dtype_)); }
  // Σ_l len(l).
  int64_t total_rows() const;
  void Clear();
  // The layer's K and V rows as raw bytes of dtype(), [len, kv_dim] each.
  const uint8_t* k_bytes(int layer) const;
  const uint8_t* v_bytes(int layer) const;
  // Room for `rows` more rows in every layer, so that appending them (decode steps, one row
  // per layer each) never moves a layer: a vector growing by doubling would copy the layer and
  // hold up to twice its memory.
  void ReserveRows(int rows);
  // Appends n rows already in host memory and in dtype(): K and V [n, kv_dim] each (any
  // alignment). Room for `reserve_rows` rows in all is made first when that is more.
  void AppendHostRows(int layer, const void* k, const void* v, const int32_t* positions, int n,
                      int reserve_rows = 0);

  int n_layers() const override { return static_cast<int>(layers.size()); }
  int len(int layer) const override { return layers[layer].len(); }
  absl::Status Append(const Backend& backend, int layer, const float* k, const float* v,
                      const int32_t* positions, int n) override;
  void Spans(int layer, std::vector<KvSpan>* spans) const override;
  DType dtype() const override { return dtype_; }
  Device device() const override { return Device::kCpu; }

 private:
  DType dtype_ = DType::kF32;
};

// A cache in a backend's memory, each layer contiguous in the host cache's dtype (F32 or BF16)
// with room for its rows plus `reserve_rows`: how a single sequence decodes on a device backend
// (hapctl run, the in-process pipeline) without a block pool.
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
  DType dtype() const override { return dtype_; }
  Device device() const override { return device_; }

 private:
  struct Layer {
    BackendBuffer k, v;  // dtype_ [capacity, kv_dim]
    int capacity = 0;
    int len = 0;
  };
  DeviceKv() = default;

  int kv_dim_ = 0;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
  std::vector<Layer> layers_;
};

}  // namespace hap
