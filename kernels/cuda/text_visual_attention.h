// Text→visual attention rows on the GPU (kernels/cpu/prune/attention_rows.h, docs/design.md §3): the
// post-softmax weights of the text rows on the visual keys, rebuilt from Q_text, K_visual and
// each row's log-sum-exp, or renormalised over the visual tokens, with optional row entropies.
#pragma once

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"
#include "kernels/op_args.h"

namespace hap::cuda {

// The contract of kernels::TextVisualAttention with device pointers (q_text, k_vis, lse, out,
// row_entropy), the same errors as KernelStatus, and one more: head_dim above
// kTextVisualAttentionMaxHeadDim (a tile of 32 keys must fit in shared memory).
//
// One block per (8 text rows, head): the block stages 32 keys of the head's kv head at a time in
// shared memory, each warp owns one text row and each lane one key of the tile (a head_dim-long
// F32 dot product). With renormalize the logits go to `out`, then each warp takes its row's
// max, exp and sum (F64) and scales the row: the same max-subtracted softmax as the reference;
// the row entropy is ln Z − Σ e·y / Z (y = logit − max, F64 sums) rather than −Σ p ln p of the
// rounded output, which needs no logarithm per element and agrees to a few 1e-7.
// Work: n_heads·n_text·n_vis·head_dim multiply-adds; K is read ceil(n_text / 8) times per head.
KernelStatus TextVisualAttention(const TextVisualAttentionArgs& args, Stream stream);

// TextVisualAttention of renormalised rows with their entropies (args.row_entropy), then the
// PAQ of each head's map from them (PaqFromRowEntropies of args.out: F32 paq[n_heads], NaN for a
// map that fails its checks), in one launch: the last of a head's blocks to finish (counted in
// head_done[h] with an atomic add) makes that head's PAQ, reading the other blocks' rows through
// L2, and sets the count back to 0. head_done: n_heads device counters, 0 before the call and
// after it; a stream's calls may share them, calls on streams that can overlap may not.
KernelStatus TextVisualAttentionPaq(const TextVisualAttentionArgs& args, float* paq,
                                    unsigned* head_done, Stream stream);

inline constexpr int kTextVisualAttentionMaxHeadDim = 256;

}  // namespace hap::cuda
