// Attention of one query row over a sequence's cached keys and values stored as a list of row
// spans (one span for a contiguous cache, one per block for a paged one), in F32 or BF16. The
// arithmetic depends only on the rows' order and values, never on how they are split into
// spans, so a paged cache and a contiguous one give bit-identical results.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "base/dtype.h"
#include "kernels/op_args.h"

namespace hap::cpu {

using ::hap::DecodeAttentionArgs;
using ::hap::KvSpan;
using ::hap::StoreKvRowsArgs;

// out_h = Σ_j softmax_j(scale · q_h·k_j) v_j over every row of every span, for each sequence of
// the batch (DecodeAttentionArgs); the (sequence, head) pairs run in parallel on the default pool
// in one hand-over. Scores in F32 (each q·k in one fixed order), softmax with the row max
// subtracted and the sum in F64, as Attention does. A sequence's result does not depend on the
// batch it is in, bit for bit.
absl::Status DecodeAttention(const DecodeAttentionArgs& args);

// Double-precision reference for tests.
void DecodeAttentionReference(const DecodeAttentionArgs& args);

// Row i of args.k and args.v converted to args.dtype (ConvertFromF32: F32 as it is, BF16 rounded
// to nearest even) at args.k_dst[i] and args.v_dst[i]. InvalidArgument for a dtype other than
// F32 or BF16, a negative count or null tables.
absl::Status StoreKvRows(const StoreKvRowsArgs& args);

}  // namespace hap::cpu
