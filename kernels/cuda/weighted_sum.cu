#include "kernels/cuda/weighted_sum.h"

#include <string>

#include "kernels/cuda/device.cuh"

namespace hap::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 2048;  // grid-stride beyond: enough to fill an H100

// One element per thread (grid-stride). Exactly one of `list` (device array of map pointers)
// and `contiguous` (F32 [n_maps, size]) is non-null.
__global__ void WeightedSumKernel(const float* const* list, const float* contiguous,
                                  const float* weights, int n_maps, int64_t size, float* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < size;
       e += stride) {
    double acc = 0.0;
    for (int c = 0; c < n_maps; ++c) {
      const float x = list != nullptr ? list[c][e] : contiguous[c * size + e];
      acc += static_cast<double>(weights[c]) * x;
    }
    out[e] = static_cast<float>(acc);
  }
}

KernelStatus LaunchWeightedSum(const char* op, const float* const* list, const float* contiguous,
                               const float* weights, int n_maps, int64_t size, float* out,
                               Stream stream) {
  if ((list == nullptr && contiguous == nullptr) || weights == nullptr || out == nullptr ||
      n_maps <= 0 || size <= 0) {
    return KernelStatus::Error(std::string(op) + ": null pointer or non-positive size");
  }
  const unsigned blocks =
      CeilDiv(size, kThreads) < kMaxBlocks ? CeilDiv(size, kThreads) : kMaxBlocks;
  return Launch("WeightedSumKernel", WeightedSumKernel, dim3(blocks), dim3(kThreads), 0, stream,
                list, contiguous, weights, n_maps, size, out);
}

}  // namespace

KernelStatus WeightedSumMaps(const float* const* maps, const float* weights, int n_maps,
                             int64_t size, float* out, Stream stream) {
  if (maps == nullptr) return KernelStatus::Error("WeightedSumMaps: null map list");
  return LaunchWeightedSum("WeightedSumMaps", maps, nullptr, weights, n_maps, size, out, stream);
}

KernelStatus WeightedSumContiguous(const float* maps, const float* weights, int n_maps,
                                   int64_t size, float* out, Stream stream) {
  if (maps == nullptr) return KernelStatus::Error("WeightedSumContiguous: null maps");
  return LaunchWeightedSum("WeightedSumContiguous", nullptr, maps, weights, n_maps, size, out,
                           stream);
}

}  // namespace hap::cuda
