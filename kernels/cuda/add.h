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
// AddBias over up to kMaxBiasBatch outputs of one shape in one launch (a batched product's).
inline constexpr int kMaxBiasBatch = 4;
struct BiasBatch {
  float* y[kMaxBiasBatch];
  const float* bias[kMaxBiasBatch];
};
KernelStatus AddBiases(const BiasBatch& batch, int count, int64_t rows, int cols, Stream stream);
// y[r, c] ← y[r, c] + (x[r, c] + bias[c]): a residual add of a product whose bias was left to it,
// the same F32 sums as AddBias then Add.
KernelStatus AddWithBias(float* y, const float* x, const float* bias, int64_t rows, int cols,
                         Stream stream);

}  // namespace hap::cuda
