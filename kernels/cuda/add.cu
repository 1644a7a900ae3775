#include "kernels/cuda/add.h"

#include "kernels/cuda/device.cuh"

namespace hap::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 4096;

unsigned Blocks(int64_t n) {
  const unsigned blocks = CeilDiv(n, kThreads);
  return blocks < kMaxBlocks ? blocks : kMaxBlocks;
}

__global__ void AddKernel(float* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] += x[i];
  }
}

__global__ void AddBiasKernel(float* y, const float* bias, int64_t n, int cols) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] += bias[i % cols];
  }
}

}  // namespace

KernelStatus Add(float* y, const float* x, int64_t n, Stream stream) {
  if (n < 0) return KernelStatus::Error("Add: negative size");
  if (n == 0) return KernelStatus::Ok();
  return Launch("AddKernel", AddKernel, dim3(Blocks(n)), dim3(kThreads), 0, stream, y, x, n);
}

KernelStatus AddBias(float* y, const float* bias, int64_t rows, int cols, Stream stream) {
  if (rows < 0 || cols <= 0) return KernelStatus::Error("AddBias: bad shape");
  const int64_t n = rows * cols;
  if (n == 0) return KernelStatus::Ok();
  return Launch("AddBiasKernel", AddBiasKernel, dim3(Blocks(n)), dim3(kThreads), 0, stream, y,
                bias, n, cols);
}

}  // namespace hap::cuda
