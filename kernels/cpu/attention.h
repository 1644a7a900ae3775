// Scaled dot-product attention on the CPU, with grouped-query heads, an optional causal mask and
// the per-row log-sum-exp that pruning methods need to rebuild individual attention rows.
#pragma once

#include "absl/status/status.h"
#include "kernels/op_args.h"

namespace hap::cpu {

using ::hap::AttentionArgs;


absl::Status Attention(const AttentionArgs& args);

// Straightforward reference (double accumulation, explicit softmax) for tests.
void AttentionReference(const AttentionArgs& args);

}  // namespace hap::cpu
