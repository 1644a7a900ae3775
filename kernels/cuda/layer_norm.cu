#include "kernels/cuda/layer_norm.h"

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/reduce.cuh"

namespace hap::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void LayerNormKernel(const float* x, const float* w, const float* b, float* y, int d,
                                float eps) {
  HAP_SHARED(float, scratch, 32);
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * d;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * d;
  float sum = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) sum += xr[i];
  const float mean = BlockSum(sum, scratch) / d;
  float sq = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) sq += (xr[i] - mean) * (xr[i] - mean);
  const float inv = rsqrtf(BlockSum(sq, scratch) / d + eps);
  // Every thread has read its whole row before any writes it (BlockSum ends with a barrier),
  // so y may alias x.
  for (int i = threadIdx.x; i < d; i += blockDim.x) yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
}

}  // namespace

KernelStatus LayerNorm(const float* x, const float* w, const float* b, float* y, int rows, int d,
                       float eps, Stream stream) {
  if (rows < 0 || d <= 0) return KernelStatus::Error("LayerNorm: bad shape");
  if (rows == 0) return KernelStatus::Ok();
  return Launch("LayerNormKernel", LayerNormKernel, dim3(rows), dim3(kThreads), 0, stream, x, w,
                b, y, d, eps);
}

}  // namespace hap::cuda
