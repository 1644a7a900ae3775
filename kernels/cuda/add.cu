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

// The bias kernels run a block per row (grid-stride over the rows) with the threads across its
// columns: coalesced, and no division of a flat index to find the column.
unsigned RowBlocks(int64_t rows) {
  return rows < kMaxBlocks ? static_cast<unsigned>(rows) : kMaxBlocks;
}

__global__ void AddBiasKernel(float* y, const float* bias, int64_t rows, int cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* row = y + r * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) row[c] += bias[c];
  }
}

// blockIdx.y picks the member of the batch.
__global__ void AddBiasesKernel(BiasBatch batch, int64_t rows, int cols) {
  float* y = batch.y[blockIdx.y];
  const float* bias = batch.bias[blockIdx.y];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* row = y + r * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) row[c] += bias[c];
  }
}

__global__ void AddWithBiasKernel(float* y, const float* x, const float* bias, int64_t rows,
                                  int cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* row = y + r * cols;
    const float* x_row = x + r * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) row[c] += x_row[c] + bias[c];
  }
}

}  // namespace

KernelStatus AddBiases(const BiasBatch& batch, int count, int64_t rows, int cols, Stream stream) {
  if (rows < 0 || cols <= 0 || count < 0 || count > kMaxBiasBatch) {
    return KernelStatus::Error("AddBiases: bad shape or count");
  }
  const int64_t n = rows * cols;
  if (n == 0 || count == 0) return KernelStatus::Ok();
  return Launch("AddBiasesKernel", AddBiasesKernel, dim3(RowBlocks(rows), count), dim3(kThreads), 0,
                stream, batch, rows, cols);
}

KernelStatus AddWithBias(float* y, const float* x, const float* bias, int64_t rows, int cols,
                         Stream stream) {
  if (rows < 0 || cols <= 0) return KernelStatus::Error("AddWithBias: bad shape");
  const int64_t n = rows * cols;
  if (n == 0) return KernelStatus::Ok();
  return Launch("AddWithBiasKernel", AddWithBiasKernel, dim3(RowBlocks(rows)), dim3(kThreads), 0,
                stream, y, x, bias, rows, cols);
}

KernelStatus Add(float* y, const float* x, int64_t n, Stream stream) {
  if (n < 0) return KernelStatus::Error("Add: negative size");
  if (n == 0) return KernelStatus::Ok();
  return Launch("AddKernel", AddKernel, dim3(Blocks(n)), dim3(kThreads), 0, stream, y, x, n);
}

KernelStatus AddBias(float* y, const float* bias, int64_t rows, int cols, Stream stream) {
  if (rows < 0 || cols <= 0) return KernelStatus::Error("AddBias: bad shape");
  const int64_t n = rows * cols;
  if (n == 0) return KernelStatus::Ok();
  return Launch("AddBiasKernel", AddBiasKernel, dim3(RowBlocks(rows)), dim3(kThreads), 0, stream, y,
                bias, rows, cols);
}

}  // namespace hap::cuda
