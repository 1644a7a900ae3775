#include <string>

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

// blockIdx.y = 0 rounds a into a_out, 1 rounds b into b_out (grid-stride over x, as
// RoundToBf16Kernel and RoundToF16Kernel).
template <bool kBf16>
__global__ void RoundPairKernel(const float* a, uint16_t* a_out, const float* b, uint16_t* b_out,
                                int64_t n) {
  const float* x = blockIdx.y == 0 ? a : b;
  uint16_t* out = blockIdx.y == 0 ? a_out : b_out;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = kBf16 ? F32ToBf16(x[i]) : F32ToF16(x[i]);
  }
}

// Block (row i, blockIdx.y = 0 for K, 1 for V): the row's d values to its address.
template <bool kBf16>
__global__ void StoreRowsKernel(const float* k, const float* v, void* const* k_dst,
                                void* const* v_dst, int d) {
  const int i = blockIdx.x;
  const float* src = (blockIdx.y == 0 ? k : v) + static_cast<int64_t>(i) * d;
  void* dst = blockIdx.y == 0 ? k_dst[i] : v_dst[i];
  for (int t = threadIdx.x; t < d; t += blockDim.x) {
    if (kBf16) {
      static_cast<uint16_t*>(dst)[t] = F32ToBf16(src[t]);
    } else {
      static_cast<float*>(dst)[t] = src[t];
    }
  }
}

}  // namespace

KernelStatus StoreRowsAs(ElemType type, const float* k, const float* v, void* const* k_dst,
                         void* const* v_dst, int n, int d, Stream stream) {
  if (n < 0 || n > 65535 || d <= 0) {
    return KernelStatus::Error("StoreRowsAs: " + std::to_string(n) + " rows of " +
                               std::to_string(d) + " (1 to 65535 rows)");
  }
  if (n == 0) return KernelStatus::Ok();
  switch (type) {
    case ElemType::kF32:
      return Launch("StoreRowsKernel", StoreRowsKernel<false>, dim3(n, 2), dim3(kThreads), 0,
                    stream, k, v, k_dst, v_dst, d);
    case ElemType::kBF16:
      return Launch("StoreRowsKernel", StoreRowsKernel<true>, dim3(n, 2), dim3(kThreads), 0, stream,
                    k, v, k_dst, v_dst, d);
    default:
      return KernelStatus::Error("StoreRowsAs: KV rows are F32 or BF16");
  }
}

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

KernelStatus RoundF32PairTo(ElemType type, const float* a, void* a_out, const float* b, void* b_out,
                            int64_t n, Stream stream) {
  if (n < 0) return KernelStatus::Error("RoundF32PairTo: negative size");
  if (n == 0) return KernelStatus::Ok();
  const unsigned blocks = CeilDiv(n, kThreads) < kMaxBlocks ? CeilDiv(n, kThreads) : kMaxBlocks;
  auto* a_bits = static_cast<uint16_t*>(a_out);
  auto* b_bits = static_cast<uint16_t*>(b_out);
  switch (type) {
    case ElemType::kBF16:
      return Launch("RoundPairKernel", RoundPairKernel<true>, dim3(blocks, 2), dim3(kThreads), 0,
                    stream, a, a_bits, b, b_bits, n);
    case ElemType::kF16:
      return Launch("RoundPairKernel", RoundPairKernel<false>, dim3(blocks, 2), dim3(kThreads), 0,
                    stream, a, a_bits, b, b_bits, n);
    default:
      return KernelStatus::Error("RoundF32PairTo: the target must be BF16 or F16");
  }
}

}  // namespace hap::cuda
