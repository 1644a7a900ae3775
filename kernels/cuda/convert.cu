#include "kernels/cuda/convert.h"

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/dtype.cuh"

namespace hap::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 4096;

__global__ void RoundToBf16Kernel(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = F32ToBf16(x[i]);
  }
}

__global__ void RoundToF16Kernel(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = F32ToF16(x[i]);
  }
}

}  // namespace

KernelStatus RoundF32To(ElemType type, const float* x, void* out, int64_t n, Stream stream) {
  if (n < 0) return KernelStatus::Error("RoundF32To: negative size");
  if (n == 0) return KernelStatus::Ok();
  const unsigned blocks = CeilDiv(n, kThreads) < kMaxBlocks ? CeilDiv(n, kThreads) : kMaxBlocks;
  auto* bits = static_cast<uint16_t*>(out);
  switch (type) {
    case ElemType::kBF16:
      return Launch("RoundToBf16Kernel", RoundToBf16Kernel, dim3(blocks), dim3(kThreads), 0,
                    stream, x, bits, n);
    case ElemType::kF16:
      return Launch("RoundToF16Kernel", RoundToF16Kernel, dim3(blocks), dim3(kThreads), 0,
                    stream, x, bits, n);
    default:
      return KernelStatus::Error("RoundF32To: the target must be BF16 or F16");
  }
}

}  // namespace hap::cuda
