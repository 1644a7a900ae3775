// Scaled dot-product attention on the CPU, with grouped-query heads, an optional causal mask and
// the per-row log-sum-exp that pruning methods need to rebuild individual attention rows.
#pragma once

#include "absl/status/status.h"

namespace hap::cpu {

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

absl::Status Attention(const AttentionArgs& args);

// Straightforward reference (double accumulation, explicit softmax) for tests.
void AttentionReference(const AttentionArgs& args);

}  // namespace hap::cpu
