// Decode attention on the GPU (kernels/cpu/decode_attention.h): one query row of one sequence
// over its cached keys and values, held as a list of row spans (one for a contiguous cache, one
// per block for a paged one), F32 or BF16. One launch per sequence (no batching across
// sequences yet): a block per query head walks the rows in chunks of 128, one row per thread for
// the scores, with an online softmax across chunks. Rows are chunked by their position in the
// sequence, never by span, so how the rows are split into spans does not change a bit of the
// result.
#pragma once

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"
#include "kernels/op_args.h"

namespace hap::cuda {

inline constexpr int kMaxDecodeHeadDim = 256;

// args as for cpu::DecodeAttention, except that args.spans is a DEVICE array of args.n_spans
// spans whose k and v are device pointers (q and out are device pointers too). Since the host
// cannot read the spans, only the host-side fields are validated (non-null pointers, n_spans >
// 0, positive heads and head_dim up to kMaxDecodeHeadDim, n_heads a multiple of n_kv_heads,
// kv_dtype F32 or BF16); spans with rows <= 0 are skipped, and spans holding no row at all give
// out = 0 (cpu::DecodeAttention rejects that case: the caller must not send it).
KernelStatus DecodeAttention(const DecodeAttentionArgs& args, Stream stream);

}  // namespace hap::cuda
