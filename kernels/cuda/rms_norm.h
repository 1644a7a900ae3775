// RMSNorm on the GPU: y[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) · w (kernels/cpu/norm.h).
// One block per row; the sum of squares is an F32 tree sum (the CPU reference sums in F64).
#pragma once

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// x, y F32 [rows, d] (y may alias x); w F32 [d]. Device pointers.
KernelStatus RmsNorm(const float* x, const float* w, float* y, int rows, int d, float eps,
                     Stream stream);

// RmsNorm that also writes y rounded to `narrow_type` (kBF16 or kF16, nearest even) into
// y_narrow [rows, d]: bit for bit RmsNorm followed by RoundF32To, in one launch. The input of
// the products that read the normalised rows from narrow weights (a planned step's q/k/v or
// gate/up), which would otherwise each round it again.
KernelStatus RmsNormRounded(const float* x, const float* w, float* y, ElemType narrow_type,
                            void* y_narrow, int rows, int d, float eps, Stream stream);

}  // namespace hap::cuda
