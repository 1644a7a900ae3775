// Text→visual attention rows for visual-token pruning (docs/design.md §3): the post-softmax weights
// of selected query rows on the visual keys, computed from Q, K and each row's log-sum-exp so
// the full N×N attention map is never materialised.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/op_args.h"

namespace hap::kernels {

using ::hap::TextVisualAttentionArgs;  // kernels/op_args.h

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
