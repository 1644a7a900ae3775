// Attention of one query row over a sequence's cached keys and values stored as a list of row
// spans (one span for a contiguous cache, one per block for a paged one), in F32 or BF16. The
// arithmetic depends only on the rows' order and values, never on how they are split into
// spans, so a paged cache and a contiguous one give bit-identical results.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "base/dtype.h"

namespace hap::cpu {

// `rows` consecutive cache rows: k and v each [rows, n_kv_heads * head_dim] of the cache dtype.
struct KvSpan {
  const void* k = nullptr;
  const void* v = nullptr;
  int rows = 0;
};

struct DecodeAttentionArgs {
  const float* q = nullptr;  // F32 [n_heads * head_dim], RoPE applied
  const KvSpan* spans = nullptr;
  int n_spans = 0;           // together they hold every row the query sees, in order
  DType kv_dtype = DType::kF32;  // kF32 or kBF16
  float* out = nullptr;      // F32 [n_heads * head_dim]
  int n_heads = 0;
  int n_kv_heads = 0;  // query head h reads kv head h / (n_heads / n_kv_heads)
  int head_dim = 0;
  float scale = 0.f;
};

// out_h = Σ_j softmax_j(scale · q_h·k_j) v_j over every row of every span; heads run in
// parallel on the default pool. Scores in F32 (each q·k in one fixed order), softmax with the
// row max subtracted and the sum in F64, as Attention does.
absl::Status DecodeAttention(const DecodeAttentionArgs& args);

// Double-precision reference for tests.
void DecodeAttentionReference(const DecodeAttentionArgs& args);

}  // namespace hap::cpu
