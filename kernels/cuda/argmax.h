// Per-row argmax of logits on the GPU, for greedy sampling: only the winning token ids leave
// the device, not the [rows, vocab] logits.
#pragma once

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// out[r] = the index of the largest logits[r, :], ties to the lower index (the sampler's
// std::max_element). NaN never wins; a row of NaNs only gives 0. One block per row: strided
// per-thread maxima, then warp and block reductions of (value, index) pairs.
//   logits: F32 [rows, n] (device)   out: I32 [rows] (device)
// Errors: null pointers, rows < 0, n ≤ 0.
KernelStatus ArgMaxRows(const float* logits, int rows, int n, int* out, Stream stream);

}  // namespace hap::cuda
