#include "kernels/cuda/device.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/layer_norm.h"
#include "kernels/cuda/reduce.cuh"

namespace hap::cuda {
namespace {

constexpr int kThreads = 256;

// rounded (optional): the results also rounded to `narrow` (BF16 or F16), for the products
// from narrow weights that read them (LayerNormRounded).
__global__ void LayerNormKernel(const float* x, const float* w, const float* b, float* y, int d,
                                float eps, uint16_t* rounded, ElemType narrow) {
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
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = (xr[i] - mean) * inv * w[i] + b[i];
    yr[i] = v;
    if (rounded != nullptr) {
      rounded[static_cast<int64_t>(blockIdx.x) * d + i] =
          narrow == ElemType::kBF16 ? F32ToBf16(v) : F32ToF16(v);
    }
  }
}

}  // namespace

KernelStatus LayerNorm(const float* x, const float* w, const float* b, float* y, int rows, int d,
                       float eps, Stream stream) {
  if (rows < 0 || d <= 0) return KernelStatus::Error("LayerNorm: bad shape");
  if (rows == 0) return KernelStatus::Ok();
  return Launch("LayerNormKernel", LayerNormKernel, dim3(rows), dim3(kThreads), 0, stream, x, w, b,
                y, d, eps, static_cast<uint16_t*>(nullptr), ElemType::kF32);
}

KernelStatus LayerNormRounded(const float* x, const float* w, const float* b, float* y,
                              ElemType narrow, void* rounded, int rows, int d, float eps,
                              Stream stream) {
  if (rows < 0 || d <= 0) return KernelStatus::Error("LayerNormRounded: bad shape");
  if (rounded == nullptr || (narrow != ElemType::kBF16 && narrow != ElemType::kF16)) {
    return KernelStatus::Error("LayerNormRounded: no rounded output, or a wide type");
  }
  if (rows == 0) return KernelStatus::Ok();
  return Launch("LayerNormKernel", LayerNormKernel, dim3(rows), dim3(kThreads), 0, stream, x, w, b,
                y, d, eps, static_cast<uint16_t*>(rounded), narrow);
}

}  // namespace hap::cuda
