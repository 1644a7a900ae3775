// Per-row argmax of logits on the GPU, for greedy sampling: only the winning token ids leave
// the device, not the [rows, vocab] logits.
#pragma once

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// out[r] = the index std::max_element picks in logits[r, :] (the greedy sampler's rule): the
// first largest value, a NaN skipped — except a NaN at index 0, which std::max_element never
// replaces, so such a row (and a row of NaNs) gives 0. One block per row: strided per-thread
// maxima, then warp and block reductions of (value, index) pairs.
//   logits: F32 [rows, n] (device)   out: I32 [rows] (device)
// Errors: null pointers, rows < 0, n ≤ 0.
KernelStatus ArgMaxRows(const float* logits, int rows, int n, int* out, Stream stream);

}  // namespace hap::cuda
