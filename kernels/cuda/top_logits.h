// Sampling candidates on the GPU (kernels/cpu/sampling.h TopLogits): per row of logits the k
// largest values with their ids in the sampler's order, and the row's softmax denominator, so a
// decode step that samples with top-k/top-p sends back 2 KiB a row instead of the row.
#pragma once

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

inline constexpr int kTopLogitsMaxK = 256;  // hap::kMaxTopLogits (kernels/op_args.h)

// One block per row, up to 1024 threads:
//  1. a NaN anywhere in the row (which has no place in the order): ids all −1, values and
//     row_sum NaN;
//  2. radix select of the k-th largest key (OrderedKey: −0 and +0 one key; four 8-bit passes of
//     shared-memory histograms over strided, coalesced loads), and e = how many of the values
//     with that key are kept (the ones with the lowest ids);
//  3. each thread's contiguous slice keeps its values above the cut and, in id order, its equal
//     ones while fewer than e precede them, at offsets from one block scan: the k candidates
//     land in shared memory in id order;
//  4. candidate c goes to rank = #{larger candidates} + #{equal candidates with a lower id}: the
//     sampler's order (value descending, ties to the lower id), with no sort;
//  5. with a temperature T > 0: row_sum = Σ_i exp((x_i − max) / T), each term in F64 as the
//     sampler takes it, per-thread partial sums, then a block tree (another order of summation
//     than the sampler's: the caller bounds the difference).
//   logits: F32 [rows, n] (device)   temperature: F32 [rows] (device) or null
//   values: F32 [rows, k]   ids: I32 [rows, k]   row_sum: F64 [rows] (device; with temperature)
// Errors: null pointers, rows < 0, n ≤ 0, k outside [1, min(n, 256)]. rows = 0 launches nothing.
KernelStatus TopLogits(const float* logits, int rows, int n, int k, const float* temperature,
                       float* values, int* ids, double* row_sum, Stream stream);

}  // namespace hap::cuda
