#include "kernels/cuda/activation.h"

#include "kernels/cuda/device.cuh"

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

}  // namespace

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
