#include "kernels/cuda/embedding.h"

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/dtype.cuh"

namespace hap::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void EmbeddingKernel(const void* table, ElemType type, const int32_t* ids, int d,
                                float* out) {
  const int64_t base = static_cast<int64_t>(ids[blockIdx.x]) * d;
  float* row = out + static_cast<int64_t>(blockIdx.x) * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) row[i] = LoadAsF32(table, base + i, type);
}

}  // namespace

KernelStatus Embedding(const void* table, ElemType type, const int32_t* ids, int n, int d,
                       float* out, Stream stream) {
  if (n < 0 || d <= 0) return KernelStatus::Error("Embedding: bad shape");
  if (n == 0) return KernelStatus::Ok();
  return Launch("EmbeddingKernel", EmbeddingKernel, dim3(n), dim3(kThreads), 0, stream, table,
                type, ids, d, out);
}

}  // namespace hap::cuda
