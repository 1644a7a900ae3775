// The sampling ops a backend offers so that a device sends back a few numbers per decoded row
// instead of the row of logits (runtime/model/row_sampling.h): the greedy argmax and the top
// candidates with the softmax denominator. These are the CPU references the CUDA kernels are
// checked against.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/op_args.h"

namespace hap::cpu {

// ids[r] = std::max_element(row r) − row r: the first largest value (ties to the lower id), a
// NaN skipped unless it is element 0, which std::max_element never replaces (the greedy
// sampler's rule, NaN included).
//   logits: F32 [rows, n]   ids: I32 [rows]
// InvalidArgument on null pointers, rows < 0 or n ≤ 0.
absl::Status ArgMaxRows(const float* logits, int rows, int n, int32_t* ids);

// TopLogitsArgs (kernels/op_args.h), every pointer in host memory: per row a partial sort on
// (value descending, id ascending) and row_sum summed in id order.
// InvalidArgument on null pointers (row_sum with temperature), rows < 0, n ≤ 0 or k outside
// [1, min(n, kMaxTopLogits)].
absl::Status TopLogits(const TopLogitsArgs& args);

}  // namespace hap::cpu
