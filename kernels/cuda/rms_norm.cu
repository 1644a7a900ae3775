#include "kernels/cuda/device.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/rms_norm.h"

namespace hap::cuda {
namespace {

constexpr int kThreads = 256;

// kNarrow: 0 none, 1 BF16, 2 F16 (the copy of y RmsNormRounded writes beside it).
template <int kNarrow>
__device__ void RmsNormRow(const float* x, const float* w, float* y, uint16_t* y_narrow, int d,
                           float eps) {
  HAP_SHARED(float, scratch, 32);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * d;
  const float* xr = x + row;
  float* yr = y + row;
  float ss = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
  ss = BlockSum(ss, scratch);
  const float inv = rsqrtf(ss / d + eps);
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = xr[i] * inv * w[i];
    yr[i] = v;
    if (kNarrow == 1) y_narrow[row + i] = F32ToBf16(v);
    if (kNarrow == 2) y_narrow[row + i] = F32ToF16(v);
  }
}

__global__ void RmsNormKernel(const float* x, const float* w, float* y, int d, float eps) {
  RmsNormRow<0>(x, w, y, nullptr, d, eps);
}

__global__ void RmsNormBf16Kernel(const float* x, const float* w, float* y, uint16_t* y_narrow,
                                  int d, float eps) {
  RmsNormRow<1>(x, w, y, y_narrow, d, eps);
}

__global__ void RmsNormF16Kernel(const float* x, const float* w, float* y, uint16_t* y_narrow,
                                 int d, float eps) {
  RmsNormRow<2>(x, w, y, y_narrow, d, eps);
}

}  // namespace

KernelStatus RmsNorm(const float* x, const float* w, float* y, int rows, int d, float eps,
                     Stream stream) {
  if (rows < 0 || d <= 0) return KernelStatus::Error("RmsNorm: bad shape");
  if (rows == 0) return KernelStatus::Ok();
  return Launch("RmsNormKernel", RmsNormKernel, dim3(rows), dim3(kThreads), 0, stream, x, w, y,
                d, eps);
}

KernelStatus RmsNormRounded(const float* x, const float* w, float* y, ElemType narrow_type,
                            void* y_narrow, int rows, int d, float eps, Stream stream) {
  if (rows < 0 || d <= 0) return KernelStatus::Error("RmsNormRounded: bad shape");
  if (y_narrow == nullptr) return KernelStatus::Error("RmsNormRounded: no narrow output");
  if (rows == 0) return KernelStatus::Ok();
  auto* bits = static_cast<uint16_t*>(y_narrow);
  switch (narrow_type) {
    case ElemType::kBF16:
      return Launch("RmsNormBf16Kernel", RmsNormBf16Kernel, dim3(rows), dim3(kThreads), 0, stream,
                    x, w, y, bits, d, eps);
    case ElemType::kF16:
      return Launch("RmsNormF16Kernel", RmsNormF16Kernel, dim3(rows), dim3(kThreads), 0, stream, x,
                    w, y, bits, d, eps);
    default:
      return KernelStatus::Error("RmsNormRounded: the narrow type must be BF16 or F16");
  }
}

}  // namespace hap::cuda
