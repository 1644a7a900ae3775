#include "kernels/cuda/token_scores.h"

#include "kernels/cuda/device.cuh"

namespace hap::cuda {
namespace {

constexpr int kColumns = 32;   // per block: blockDim.x
constexpr int kRowGroups = 8;  // per block: blockDim.y

// grid ceil(n_vis / 32), block (32, 8). rows null: every row of the map; else n_sel indices.
__global__ void TokenScoresKernel(const float* map, int64_t n_rows, int n_vis, const int* rows,
                                  int n_sel, float* scores) {
  HAP_SHARED(double, partial, kRowGroups* kColumns);  // F64 [8, 32]
  const int i = blockIdx.x * kColumns + threadIdx.x;
  const int64_t n = rows != nullptr ? n_sel : n_rows;
  double acc = 0.0;
  if (i < n_vis) {
    for (int64_t r = threadIdx.y; r < n; r += kRowGroups) {
      const int64_t row = rows != nullptr ? rows[r] : r;
      if (row < 0 || row >= n_rows) {
        acc = NAN;
        break;
      }
      acc += map[row * n_vis + i];
    }
  }
  partial[threadIdx.y * kColumns + threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || i >= n_vis) return;
  double sum = 0.0;
  for (int g = 0; g < kRowGroups; ++g) sum += partial[g * kColumns + threadIdx.x];
  scores[i] = static_cast<float>(sum / n);
}

}  // namespace

KernelStatus TokenScores(const float* map, int64_t n_rows, int n_vis, float* scores,
                         Stream stream) {
  if (map == nullptr || scores == nullptr || n_rows <= 0 || n_vis <= 0) {
    return KernelStatus::Error("TokenScores: null pointer or non-positive size");
  }
  return Launch("TokenScoresKernel", TokenScoresKernel, dim3(CeilDiv(n_vis, kColumns)),
                dim3(kColumns, kRowGroups), 0, stream, map, n_rows, n_vis,
                static_cast<const int*>(nullptr), 0, scores);
}

KernelStatus TokenScoresOfRows(const float* map, int64_t n_rows, int n_vis, const int* rows,
                               int n_sel, float* scores, Stream stream) {
  if (map == nullptr || scores == nullptr || rows == nullptr || n_rows <= 0 || n_vis <= 0 ||
      n_sel <= 0) {
    return KernelStatus::Error("TokenScoresOfRows: null pointer or non-positive size");
  }
  return Launch("TokenScoresKernel", TokenScoresKernel, dim3(CeilDiv(n_vis, kColumns)),
                dim3(kColumns, kRowGroups), 0, stream, map, n_rows, n_vis, rows, n_sel, scores);
}

}  // namespace hap::cuda
