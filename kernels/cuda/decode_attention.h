// Decode attention on the GPU (kernels/cpu/decode_attention.h): one query row of one sequence
// over its cached keys and values, held as a list of row spans (one for a contiguous cache, one
// per block for a paged one), F32 or BF16. One launch for every sequence of a batched step: a
// block per (query head, sequence) walks the sequence's rows in chunks of 128, one row per
// thread for the scores, with an online softmax across chunks; a block reads only its own
// sequence, so a sequence's result does not depend on the batch it is in. Rows are chunked by their
// position in the sequence, never by span, so how the rows are split into spans does not change a
// bit of the result.
#pragma once

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"
#include "kernels/op_args.h"

namespace hap::cuda {

inline constexpr int kMaxDecodeHeadDim = 256;

// args as for cpu::DecodeAttention, except that args.spans is a DEVICE array of args.n_spans
// spans whose k and v are device pointers, and args.span_begin (when not null) a DEVICE array
// of n_seqs + 1 ints (q and out are device pointers too). Since the host cannot read the spans,
// only the host-side fields are validated (non-null pointers, n_spans > 0, n_seqs in [1, 65535]
// with span_begin for more than one, positive heads and head_dim up to kMaxDecodeHeadDim,
// n_heads a multiple of n_kv_heads, kv_dtype F32 or BF16); spans with rows <= 0 are skipped, and
// a sequence holding no row at all gets out = 0 (cpu::DecodeAttention rejects that case: the
// caller must not send it).
KernelStatus DecodeAttention(const DecodeAttentionArgs& args, Stream stream);

}  // namespace hap::cuda
