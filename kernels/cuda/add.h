// Residual adds and bias rows on the GPU (kernels/cpu/activation.h AddInPlace; the bias of a
// Linear, which cuBLAS does not add).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// y ← y + x over n elements. Device pointers.
KernelStatus Add(float* y, const float* x, int64_t n, Stream stream);
// y[r, c] ← y[r, c] + bias[c] for y F32 [rows, cols]. Device pointers.
KernelStatus AddBias(float* y, const float* bias, int64_t rows, int cols, Stream stream);

}  // namespace hap::cuda
