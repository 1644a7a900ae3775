// Text→visual attention rows for visual-token pruning (docs/design.md §3): the post-softmax weights
// of selected query rows on the visual keys, computed from Q, K and each row's log-sum-exp so
// the full N×N attention map is never materialised.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace hap::kernels {

// Arguments of TextVisualAttention. All strides count floats. A CUDA twin of this op takes the
// same struct (device pointers) plus a cudaStream_t.
struct TextVisualAttentionArgs {
  const float* q_text = nullptr;  // F32 [n_text, q_stride]; head h at columns [h·hd, (h+1)·hd)
  const float* k_vis = nullptr;   // F32 [n_vis, k_stride]; kv head g at columns [g·hd, (g+1)·hd)
  const float* lse = nullptr;     // F32 [n_heads, lse_stride]; lse[h·lse_stride + j] belongs to
                                  // text row j. Only read when renormalize is false.
  int n_text = 0;
  int n_vis = 0;
  int n_heads = 0;
  int n_kv_heads = 0;  // query head h reads kv head h / (n_heads / n_kv_heads)
  int head_dim = 0;
  int64_t q_stride = 0;    // 0 → n_heads·head_dim
  int64_t k_stride = 0;    // 0 → n_kv_heads·head_dim
  int64_t lse_stride = 0;  // 0 → n_text
  float scale = 0.f;       // softmax scale, usually 1/sqrt(head_dim)
  // false: out = α_ji = exp(scale·q_j·k_i − lse_j), the weights of the full softmax row.
  // true:  out = α_ji / Σ_i' α_ji' (each row a distribution over the visual tokens present).
  bool renormalize = true;
  float* out = nullptr;  // F32 [n_heads, n_text, n_vis]
  // Optional, with renormalize only: F64 [n_heads, n_text], the entropy −Σ_i â_i ln â_i of
  // each renormalised row, from the logits (no per-element logarithm). PaqFromRowEntropies
  // turns it into PAQ without taking a logarithm per map element.
  double* row_entropy = nullptr;
};

// Writes exactly n_heads·n_text·n_vis floats to args.out (and n_heads·n_text doubles to
// args.row_entropy when given). InvalidArgument on null pointers, non-positive sizes, n_heads not
// a multiple of n_kv_heads, strides smaller than a row, a non-finite scale, or row_entropy
// without renormalize.
//
// With renormalize the log-sum-exp cancels, so each row is computed as a softmax over the
// visual logits alone (max-subtracted): equal to α/Σα in exact arithmetic, and still defined
// when every α_ji underflows because the row's mass sits on text or sink tokens.
//
// The fast path computes each head's logits with cblas_sgemm on strided views of Q and K,
// written into args.out and turned into weights in place by vectorised exp passes; heads are
// spread over the default thread pool when a call is large (≥ 2^24 multiply-adds). It matches the
// reference to float rounding (~1e-6 relative), not bit for bit.
absl::Status TextVisualAttention(const TextVisualAttentionArgs& args);

// The scalar CPU reference of the same op (one dot product per element, std::exp, one thread;
// row entropies in F64 from the output by definition). Same contract and errors.
absl::Status TextVisualAttentionReference(const TextVisualAttentionArgs& args);

}  // namespace hap::kernels
