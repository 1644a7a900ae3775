#include <cstdint>
#include <string>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/hap_scoring.h"
#include "kernels/cuda/paq.cuh"
#include "kernels/cuda/paq_softmax.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/topk.cuh"

namespace hap::cuda {
namespace {

constexpr int kSumThreads = 256;
constexpr unsigned kMaxSumBlocks = 2048;  // grid-stride beyond, as WeightedSumKernel
constexpr int kRowGroups = 8;             // TokenScoresKernel's partial sums of every 8th row

// The weights (every block makes them; the first writes them out), then one element per thread
// (grid-stride), as WeightedSumKernel.
__device__ __forceinline__ void BlockPaqSoftmaxSum(const float* maps, const float* paq, int n_maps,
                                                   double temperature, int64_t size, float* weights,
                                                   float* out) {
  HAP_SHARED(double, e, kPaqSoftmaxStored);
  HAP_SHARED(double, at, 3);
  HAP_SHARED(float, w, kPaqSoftmaxStored);
  BlockPaqSoftmax(paq, n_maps, temperature, e, at, w);
  __syncthreads();
  if (blockIdx.x == 0) {
    for (int c = threadIdx.x; c < n_maps; c += blockDim.x) weights[c] = w[c];
  }
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < size;
       i += stride) {
    double acc = 0.0;
    for (int c = 0; c < n_maps; ++c) acc += static_cast<double>(w[c]) * maps[c * size + i];
    out[i] = static_cast<float>(acc);
  }
}

__global__ void PaqSoftmaxSumKernel(const float* maps, const float* paq, int n_maps,
                                    double temperature, int64_t size, float* weights, float* out) {
  BlockPaqSoftmaxSum(maps, paq, n_maps, temperature, size, weights, out);
}

// Thread i the score of column i: the 8 partial sums of TokenScoresKernel (rows g, g + 8, …)
// made one after the other and added in the same order, then its rank. With map_paq, first the
// map's PAQ (BlockPaq, as PaqKernel makes it). kThroughL2: the map is read through L2 (other
// blocks of the launch wrote it).
template <bool kThroughL2>
__device__ __forceinline__ void BlockTokenScoresTopK(const float* map, int64_t n_rows, int n_vis,
                                                     int k, float* scores, int* kept,
                                                     float* map_paq) {
  HAP_SHARED(float, s, kRankMax);
  HAP_SHARED(int, has_nan, 1);
  HAP_SHARED(unsigned long long, scan_scratch, 32);
  HAP_SHARED(double, paq_scratch, 32);
  HAP_SHARED(int, paq_bad, 1);
  if (map_paq != nullptr) {  // uniform: every thread or none
    BlockPaq<kThroughL2>(map, nullptr, static_cast<int>(n_rows), n_vis, map_paq, paq_scratch,
                         paq_bad);
  }
  const int i = threadIdx.x;
  float x = 0.f;
  if (i < n_vis) {
    double sum = 0.0;
    for (int g = 0; g < kRowGroups; ++g) {
      double acc = 0.0;
      for (int64_t r = g; r < n_rows; r += kRowGroups) {
        acc += PaqLoad<kThroughL2>(map + r * n_vis + i);
      }
      sum += acc;
    }
    x = static_cast<float>(sum / n_rows);
    scores[i] = x;
  }
  BlockStableTopKByRank(x, n_vis, k, s, has_nan, scan_scratch, kept);
}

// One block.
__global__ void TokenScoresTopKKernel(const float* map, int64_t n_rows, int n_vis, int k,
                                      float* scores, int* kept, float* map_paq) {
  BlockTokenScoresTopK<false>(map, n_rows, n_vis, k, scores, kept, map_paq);
}

// PaqSoftmaxSumKernel's blocks, then, in the last of them to finish (counted in *done, which it
// resets), TokenScoresTopKKernel's body over the map they summed.
__global__ void PaqSoftmaxSumScoresTopKKernel(SumScoresArgs a) {
  BlockPaqSoftmaxSum(a.maps, a.paq, a.n_maps, a.temperature, int64_t{a.n_text} * a.n_vis, a.weights,
                     a.out);
  if (!LastBlockToArrive(a.done, gridDim.x)) return;  // uniform
  BlockTokenScoresTopK</*kThroughL2=*/true>(a.out, a.n_text, a.n_vis, a.k, a.scores, a.kept,
                                            a.map_paq);
}

}  // namespace

KernelStatus PaqSoftmaxSum(const float* maps, const float* paq, int n_maps, double temperature,
                           int64_t size, float* weights, float* out, Stream stream) {
  if (maps == nullptr || paq == nullptr || weights == nullptr || out == nullptr || n_maps <= 0 ||
      size <= 0 || n_maps > kPaqSoftmaxSumMaxMaps) {
    return KernelStatus::Error("PaqSoftmaxSum: null pointer, non-positive size or n_maps " +
                               std::to_string(n_maps) + " over " +
                               std::to_string(kPaqSoftmaxSumMaxMaps));
  }
  if (!(temperature > 0) || !(temperature < INFINITY)) {
    return KernelStatus::Error("PaqSoftmaxSum: temperature is not a finite positive number");
  }
  const unsigned blocks =
      CeilDiv(size, kSumThreads) < kMaxSumBlocks ? CeilDiv(size, kSumThreads) : kMaxSumBlocks;
  return Launch("PaqSoftmaxSumKernel", PaqSoftmaxSumKernel, dim3(blocks), dim3(kSumThreads), 0,
                stream, maps, paq, n_maps, temperature, size, weights, out);
}

KernelStatus PaqSoftmaxSumScoresTopK(const SumScoresArgs& a, Stream stream) {
  if (a.maps == nullptr || a.paq == nullptr || a.weights == nullptr || a.out == nullptr ||
      a.map_paq == nullptr || a.scores == nullptr || a.kept == nullptr || a.done == nullptr ||
      a.n_maps <= 0 || a.n_maps > kPaqSoftmaxSumMaxMaps || a.n_text <= 0 || a.n_vis <= 0 ||
      a.n_vis > kTokenScoresTopKMaxTokens || a.k < 1 || a.k > a.n_vis) {
    return KernelStatus::Error(
        "PaqSoftmaxSumScoresTopK: bad arguments (n_maps=" + std::to_string(a.n_maps) +
        " n_text=" + std::to_string(a.n_text) + " n_vis=" + std::to_string(a.n_vis) +
        " k=" + std::to_string(a.k) + ")");
  }
  if (!(a.temperature > 0) || !(a.temperature < INFINITY)) {
    return KernelStatus::Error(
        "PaqSoftmaxSumScoresTopK: temperature is not a finite positive number");
  }
  // A thread per token for the last block's body, and at least the threads of PaqSoftmaxSum's
  // and PaqKernel's blocks (which give the same bits with more).
  int threads = static_cast<int>(CeilDiv(a.n_vis, 32)) * 32;
  if (threads < kSumThreads) threads = kSumThreads;
  if (threads < kPaqColumnThreads) threads = kPaqColumnThreads;
  const int64_t size = int64_t{a.n_text} * a.n_vis;
  const unsigned blocks =
      CeilDiv(size, threads) < kMaxSumBlocks ? CeilDiv(size, threads) : kMaxSumBlocks;
  return Launch("PaqSoftmaxSumScoresTopKKernel", PaqSoftmaxSumScoresTopKKernel, dim3(blocks),
                dim3(threads), 0, stream, a);
}

KernelStatus TokenScoresTopK(const float* map, int64_t n_rows, int n_vis, int k, float* scores,
                             int* kept, Stream stream, float* map_paq) {
  if (map == nullptr || scores == nullptr || kept == nullptr || n_rows <= 0 || n_vis <= 0 ||
      n_vis > kTokenScoresTopKMaxTokens || k < 1 || k > n_vis ||
      (map_paq != nullptr && n_rows > INT32_MAX)) {
    return KernelStatus::Error("TokenScoresTopK: bad arguments (n_rows=" + std::to_string(n_rows) +
                               " n_vis=" + std::to_string(n_vis) + " k=" + std::to_string(k) + ")");
  }
  // A thread per token; with the PAQ, at least the threads PaqKernel has.
  int threads = static_cast<int>(CeilDiv(n_vis, 32)) * 32;
  if (map_paq != nullptr && threads < kPaqColumnThreads) threads = kPaqColumnThreads;
  return Launch("TokenScoresTopKKernel", TokenScoresTopKKernel, dim3(1), dim3(threads), 0, stream,
                map, n_rows, n_vis, k, scores, kept, map_paq);
}

}  // namespace hap::cuda
