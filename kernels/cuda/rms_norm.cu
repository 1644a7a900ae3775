#include "kernels/cuda/rms_norm.h"

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/reduce.cuh"

namespace hap::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void RmsNormKernel(const float* x, const float* w, float* y, int d, float eps) {
  HAP_SHARED(float, scratch, 32);
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * d;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * d;
  float ss = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
  ss = BlockSum(ss, scratch);
  const float inv = rsqrtf(ss / d + eps);
  for (int i = threadIdx.x; i < d; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
}

}  // namespace

KernelStatus RmsNorm(const float* x, const float* w, float* y, int rows, int d, float eps,
                     Stream stream) {
  if (rows < 0 || d <= 0) return KernelStatus::Error("RmsNorm: bad shape");
  if (rows == 0) return KernelStatus::Ok();
  return Launch("RmsNormKernel", RmsNormKernel, dim3(rows), dim3(kThreads), 0, stream, x, w, y,
                d, eps);
}

}  // namespace hap::cuda
