// Decode attention on the GPU (kernels/cpu/decode_attention.h): one query row of one sequence
// over its cached keys and values, held as a list of row spans (one for a contiguous cache, one
// per block for a paged one), F32 or BF16, split over the rows as flash-decoding splits them so
// that a short batch still fills the GPU. A sequence's rows are cut into pieces of
// kDecodeRowsPerSplit by their position in the sequence (never by span, so how the rows are split
// into spans does not change a bit of the result); a block per (query head, sequence, slice)
// runs its piece with an online softmax per warp, and a second launch combines the slices'
// partial results (none when one slice covers every sequence). The pieces of a sequence depend
// only on its own length, so its result does not depend on the batch it is in, bit for bit, as
// long as args.max_rows covers it.
#pragma once

#include <cstddef>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"
#include "kernels/op_args.h"

namespace hap::cuda {

inline constexpr int kMaxDecodeHeadDim = 256;
inline constexpr int kDecodeRowsPerSplit = 64;
// At most this many slices per (head, sequence); a longer sequence's slices take several pieces.
inline constexpr int kMaxDecodeSlices = 64;

// The slices a step over sequences of at most max_rows rows runs in (1 when max_rows is 0).
int DecodeAttentionSlices(int max_rows);
// Bytes of device memory DecodeAttention needs for the slices' partial results (0 for one slice).
size_t DecodeAttentionPartBytes(const DecodeAttentionArgs& args);

// args as for cpu::DecodeAttention, except that args.spans is a DEVICE array of args.n_spans
// spans whose k and v are device pointers, and args.span_begin (when not null) a DEVICE array
// of n_seqs + 1 ints (q and out are device pointers too). Since the host cannot read the spans,
// only the host-side fields are validated (non-null pointers, n_spans > 0, n_seqs in [1, 65535]
// with span_begin for more than one, positive heads and head_dim up to kMaxDecodeHeadDim,
// n_heads a multiple of n_kv_heads, kv_dtype F32 or BF16); spans with rows <= 0 are skipped, and
// a sequence holding no row at all gets out = 0 (cpu::DecodeAttention rejects that case: the
// caller must not send it). `parts`: DecodeAttentionPartBytes(args) of device memory (may be null
// when that is 0).
KernelStatus DecodeAttention(const DecodeAttentionArgs& args, void* parts, Stream stream);

}  // namespace hap::cuda
