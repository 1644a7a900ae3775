#include "kernels/cuda/activation.h"
#include "kernels/cuda/device.cuh"
#include "kernels/cuda/dtype.cuh"

namespace hap::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 4096;  // grid-stride beyond this

unsigned Blocks(int64_t n) {
  const unsigned blocks = CeilDiv(n, kThreads);
  return blocks < kMaxBlocks ? blocks : kMaxBlocks;
}

__global__ void QuickGeluKernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = x[i] / (1.f + expf(-1.702f * x[i]));
  }
}

// QuickGeluKernel that also writes the results rounded (the fc2 product's input).
// With a bias (F32 [cols]), x + bias goes through the activation.
__global__ void QuickGeluRoundedKernel(float* x, int64_t n, uint16_t* rounded, ElemType narrow,
                                       const float* bias, int cols) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float a = bias == nullptr ? x[i] : x[i] + bias[i % cols];
    const float v = a / (1.f + expf(-1.702f * a));
    x[i] = v;
    rounded[i] = narrow == ElemType::kBF16 ? F32ToBf16(v) : F32ToF16(v);
  }
}

__global__ void GeluKernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = 0.5f * x[i] * (1.f + erff(x[i] * 0.70710678118654752f));
  }
}

__global__ void GeluTanhKernel(float* x, int64_t n) {
  constexpr float kC = 0.79788456080286536f;  // √(2/π)
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.f + tanhf(kC * (v + 0.044715f * v * v * v)));
  }
}

__global__ void SiluMulKernel(float* gate, const float* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    gate[i] = gate[i] / (1.f + expf(-gate[i])) * up[i];
  }
}

// SiluMulKernel that also writes each result rounded to `narrow` (BF16 or F16): the input of
// the down product on narrow weights.
__global__ void SiluMulRoundedKernel(float* gate, const float* up, int64_t n, uint16_t* rounded,
                                     ElemType narrow) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = gate[i] / (1.f + expf(-gate[i])) * up[i];
    gate[i] = v;
    rounded[i] = narrow == ElemType::kBF16 ? F32ToBf16(v) : F32ToF16(v);
  }
}

}  // namespace

KernelStatus QuickGeluRounded(float* x, int64_t n, ElemType narrow, void* rounded, Stream stream,
                              const float* bias, int cols) {
  if (n < 0 || rounded == nullptr || (narrow != ElemType::kBF16 && narrow != ElemType::kF16) ||
      (bias != nullptr && (cols <= 0 || n % cols != 0))) {
    return KernelStatus::Error(
        "QuickGeluRounded: negative size, no rounded output, a wide type or bad bias columns");
  }
  if (n == 0) return KernelStatus::Ok();
  return Launch("QuickGeluRoundedKernel", QuickGeluRoundedKernel, dim3(Blocks(n)), dim3(kThreads),
                0, stream, x, n, static_cast<uint16_t*>(rounded), narrow, bias, cols);
}

KernelStatus SiluMulRounded(float* gate, const float* up, int64_t n, ElemType narrow, void* rounded,
                            Stream stream) {
  if (n < 0 || rounded == nullptr || (narrow != ElemType::kBF16 && narrow != ElemType::kF16)) {
    return KernelStatus::Error("SiluMulRounded: negative size, no rounded output or a wide type");
  }
  if (n == 0) return KernelStatus::Ok();
  return Launch("SiluMulRoundedKernel", SiluMulRoundedKernel, dim3(Blocks(n)), dim3(kThreads), 0,
                stream, gate, up, n, static_cast<uint16_t*>(rounded), narrow);
}

KernelStatus Activate(ActivationKind kind, float* x, int64_t n, Stream stream) {
  if (n < 0) return KernelStatus::Error("Activate: negative size");
  if (n == 0) return KernelStatus::Ok();
  switch (kind) {
    case ActivationKind::kQuickGelu:
      return Launch("QuickGeluKernel", QuickGeluKernel, dim3(Blocks(n)), dim3(kThreads), 0,
                    stream, x, n);
    case ActivationKind::kGelu:
      return Launch("GeluKernel", GeluKernel, dim3(Blocks(n)), dim3(kThreads), 0, stream, x, n);
    case ActivationKind::kGeluTanh:
      return Launch("GeluTanhKernel", GeluTanhKernel, dim3(Blocks(n)), dim3(kThreads), 0, stream,
                    x, n);
  }
  return KernelStatus::Error("Activate: unknown activation");
}

KernelStatus SiluMul(float* gate, const float* up, int64_t n, Stream stream) {
  if (n < 0) return KernelStatus::Error("SiluMul: negative size");
  if (n == 0) return KernelStatus::Ok();
  return Launch("SiluMulKernel", SiluMulKernel, dim3(Blocks(n)), dim3(kThreads), 0, stream, gate,
                up, n);
}

}  // namespace hap::cuda
