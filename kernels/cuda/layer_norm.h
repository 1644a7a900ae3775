// LayerNorm on the GPU: y[r, :] = (x[r, :] − mean) / sqrt(var + eps) · w + b, biased variance
// (kernels/cpu/norm.h). One block per row; mean, then variance around it, as F32 tree sums (the
// CPU reference sums in F64).
#pragma once

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// x, y F32 [rows, d] (y may alias x); w, b F32 [d]. Device pointers.
KernelStatus LayerNorm(const float* x, const float* w, const float* b, float* y, int rows, int d,
                       float eps, Stream stream);
// LayerNorm that also writes its results rounded to `narrow` (BF16 or F16) into `rounded`
// [rows, d]: what the products from narrow weights after it read (the vision tower's q, k, v and
// fc1), with no launch of their own to round them.
KernelStatus LayerNormRounded(const float* x, const float* w, const float* b, float* y,
                              ElemType narrow, void* rounded, int rows, int d, float eps,
                              Stream stream);

}  // namespace hap::cuda
