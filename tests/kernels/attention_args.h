// The attention ops' arguments as the kernel tests and benches build them, pointers and head
// layout in one call; the fields a case needs beyond these it sets on the result.
#pragma once

#include <vector>

#include "kernels/op_args.h"

namespace hap::testing_support {

// Self-attention of n rows: q [n, heads·hd] over k and v [n, kv_heads·hd] into out [n, heads·hd]
// and, when not null, lse [heads, n]; F32 operands, one segment.
inline AttentionArgs SelfAttention(const float* q, const float* k, const float* v, float* out,
                                   float* lse, int n, int heads, int kv_heads, int hd, float scale,
                                   bool causal) {
  return AttentionArgs{.q = q,
                       .k = k,
                       .v = v,
                       .out = out,
                       .lse = lse,
                       .n_q = n,
                       .n_kv = n,
                       .n_heads = heads,
                       .n_kv_heads = kv_heads,
                       .head_dim = hd,
                       .scale = scale,
                       .causal = causal};
}

// Decode attention of n_seqs query rows q [n_seqs, heads·hd] over `spans` in kv_dtype;
// span_begin [n_seqs + 1] splits them between the sequences (null: one sequence over all). The
// output is left to the caller.
inline DecodeAttentionArgs DecodeOverSpans(const float* q, const std::vector<KvSpan>& spans,
                                           const int* span_begin, int n_seqs, DType kv_dtype,
                                           int heads, int kv_heads, int hd, float scale) {
  return DecodeAttentionArgs{.q = q,
                             .spans = spans.data(),
                             .n_spans = static_cast<int>(spans.size()),
                             .kv_dtype = kv_dtype,
                             .n_heads = heads,
                             .n_kv_heads = kv_heads,
                             .head_dim = hd,
                             .scale = scale,
                             .n_seqs = n_seqs,
                             .span_begin = span_begin};
}

// The maps of n_text text query rows q_text over n_vis visual keys k_vis (dense rows, no
// strides), renormalised over the visual tokens, into out [heads, n_text, n_vis]; lse [heads,
// n_text] is read only when the caller turns renormalisation off.
inline TextVisualAttentionArgs TextVisualRows(const float* q_text, const float* k_vis,
                                              const float* lse, int n_text, int n_vis, int heads,
                                              int kv_heads, int hd, float scale, float* out) {
  return TextVisualAttentionArgs{.q_text = q_text,
                                 .k_vis = k_vis,
                                 .lse = lse,
                                 .n_text = n_text,
                                 .n_vis = n_vis,
                                 .n_heads = heads,
                                 .n_kv_heads = kv_heads,
                                 .head_dim = hd,
                                 .scale = scale,
                                 .out = out};
}

}  // namespace hap::testing_support
