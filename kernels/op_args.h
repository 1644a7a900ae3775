// Argument structs of the attention ops, shared by every backend (kernels/backend.h): the
// pointers are in the memory of the backend that runs the op (host memory for the CPU backend).
#pragma once

#include <cstdint>

#include "base/dtype.h"

namespace hap {

// What the rows of a matrix product are. kIndependent: different sequences (a batched decode
// step): each row's result must be what that row gives alone, whatever m (batch invariance).
// kOneSequence: the tokens of one sequence (a prefill, an image): the backend may take a path
// whose arithmetic depends on m, such as rounding x to BF16 for a dot-product GEMM.
enum class LinearRows { kIndependent, kOneSequence };

struct AttentionArgs {
  const float* q = nullptr;  // F32 [n_q, n_heads * head_dim]
  const float* k = nullptr;  // F32 [n_kv, n_kv_heads * head_dim]
  const float* v = nullptr;  // F32 [n_kv, n_kv_heads * head_dim]
  float* out = nullptr;      // F32 [n_q, n_heads * head_dim]
  float* lse = nullptr;      // optional F32 [n_heads, n_q]: log Σ_j exp(scale · q·k_j)
  int n_q = 0;
  int n_kv = 0;
  int n_heads = 0;
  int n_kv_heads = 0;  // query head h reads kv head h / (n_heads / n_kv_heads)
  int head_dim = 0;
  float scale = 0.f;
  // Causal: query row r sees keys [0, causal_offset + r]; otherwise every key.
  bool causal = false;
  int causal_offset = 0;
};

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

}  // namespace hap
