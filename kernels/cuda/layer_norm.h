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

}  // namespace hap::cuda
