// A sequence's KV cache. After pruning, layers hold different numbers of tokens: each layer keeps
// exactly the rows it processed, with their original position ids. KvStore is what the decoder
// needs of a cache; KvCache keeps each layer contiguous (prefill, the KV transfer, hapctl), the
// engine's PagedKv keeps it in fixed-size blocks of a shared pool.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "base/dtype.h"
#include "kernels/op_args.h"

namespace hap {

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual int n_layers() const = 0;
  virtual int len(int layer) const = 0;
  // Appends n rows to `layer`: k, v F32 [n, kv_dim] (RoPE applied to k), original positions.
  virtual absl::Status Append(int layer, const float* k, const float* v, const int32_t* positions,
                              int n) = 0;
  // The layer's rows in order, as spans of `dtype()` for Backend::DecodeAttention.
  virtual void Spans(int layer, std::vector<KvSpan>* spans) const = 0;
  virtual DType dtype() const = 0;

  // Position id of the next token to decode: the unpruned prompt length, then +1 per token.
  int32_t next_position = 0;
};

struct LayerKv {
  std::vector<float> k;            // F32 [len, kv_dim], RoPE applied
  std::vector<float> v;            // F32 [len, kv_dim]
  std::vector<int32_t> positions;  // [len] original position ids
  int len() const { return static_cast<int>(positions.size()); }
};

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
  absl::Status Append(int layer, const float* k, const float* v, const int32_t* positions,
                      int n) override;
  void Spans(int layer, std::vector<KvSpan>* spans) const override;
  DType dtype() const override { return DType::kF32; }
};

}  // namespace hap
