// The per-request KV cache. After pruning, layers hold different numbers of tokens: each layer
// keeps exactly the rows it processed, with their original position ids.
#pragma once

#include <cstdint>
#include <vector>

namespace hap {

struct LayerKv {
  std::vector<float> k;            // F32 [len, kv_dim], RoPE applied
  std::vector<float> v;            // F32 [len, kv_dim]
  std::vector<int32_t> positions;  // [len] original position ids
  int len() const { return static_cast<int>(positions.size()); }
};

struct KvCache {
  int kv_dim = 0;  // n_kv_heads * head_dim
  std::vector<LayerKv> layers;
  // Position id of the next token to decode: the unpruned prompt length, then +1 per token.
  int32_t next_position = 0;

  // Bytes of K and V (F32) over all layers; position ids are not counted.
  int64_t bytes() const;
  // Σ_l len(l).
  int64_t total_rows() const;
  void Clear();
};

}  // namespace hap
