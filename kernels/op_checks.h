// Argument checks every backend makes the same way before an op's work, on the host copy of its
// arguments (a device backend runs them before it uploads or launches anything).
#pragma once

#include "absl/status/status.h"
#include "kernels/op_args.h"

namespace hap {

// Sequence i of a batched DecodeAttention as a call of its own (its query, output and spans).
DecodeAttentionArgs DecodeAttentionSequence(const DecodeAttentionArgs& args, int i);

// The checks DecodeAttention makes before any work: the batch's span_begin table, then each
// sequence (span rows ≥ 0 with non-null k and v, at least one row, heads, head_dim, KV dtype).
// Reads the span table and nothing the spans point to.
absl::Status ValidateDecodeAttention(const DecodeAttentionArgs& args);

}  // namespace hap
