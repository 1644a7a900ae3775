#include "kernels/cuda/topk.h"

#include <string>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/select.cuh"

namespace hap::cuda {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int kRadixBits = 8;
constexpr int kBuckets = 1 << kRadixBits;

// One block; k ≥ 1.
__global__ void StableTopKKernel(const float* scores, int n, int k, int* kept) {
  HAP_SHARED(unsigned, hist, kBuckets);
  HAP_SHARED(unsigned, chosen, 2);  // [0] the key prefix chosen so far, [1] how many to keep in it
  HAP_SHARED(int, has_nan, 1);
  HAP_SHARED(unsigned long long, scan_scratch, 32);
  const int slice = (n + blockDim.x - 1) / blockDim.x;
  const int begin = min(n, static_cast<int>(threadIdx.x) * slice);
  const int end = min(n, begin + slice);

  if (threadIdx.x == 0) {
    has_nan[0] = 0;
    chosen[0] = 0u;
    chosen[1] = static_cast<unsigned>(k);
  }
  __syncthreads();
  for (int i = begin; i < end; ++i) {
    if (scores[i] != scores[i]) has_nan[0] = 1;  // every writer stores the same value
  }
  __syncthreads();
  if (has_nan[0] != 0) {  // uniform: every thread leaves here
    for (int i = threadIdx.x; i < k; i += blockDim.x) kept[i] = -1;
    return;
  }

  // Radix select of the k-th largest key, most significant digit first.
  unsigned prefix = 0u, prefix_mask = 0u;
  for (int shift = 32 - kRadixBits; shift >= 0; shift -= kRadixBits) {
    for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) hist[b] = 0u;
    __syncthreads();
    for (int i = begin; i < end; ++i) {
      const unsigned key = OrderedKey(scores[i]);
      if ((key & prefix_mask) == prefix) atomicAdd(&hist[(key >> shift) & (kBuckets - 1)], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // The bucket holding the remaining rank-th largest of the candidates (rank ≥ 1 and at most
      // their count, so the walk stops at a bucket ≥ 0).
      unsigned rank = chosen[1];
      int b = kBuckets - 1;
      while (hist[b] < rank) rank -= hist[b--];
      chosen[0] = prefix | (static_cast<unsigned>(b) << shift);
      chosen[1] = rank;
    }
    __syncthreads();
    prefix = chosen[0];
    prefix_mask |= static_cast<unsigned>(kBuckets - 1) << shift;
  }
  const unsigned threshold = prefix;      // the k-th largest key
  const unsigned keep_equal = chosen[1];  // how many scores with that key are kept, lowest first

  // Output offsets: (count above, count equal) of the slices before this one.
  unsigned above = 0u, equal = 0u;
  for (int i = begin; i < end; ++i) {
    const unsigned key = OrderedKey(scores[i]);
    above += key > threshold;
    equal += key == threshold;
  }
  const unsigned long long before =
      BlockExclusiveScan((static_cast<unsigned long long>(above) << 32) | equal, scan_scratch);
  unsigned equal_seen = static_cast<unsigned>(before & 0xffffffffull);
  int out = static_cast<int>(before >> 32) + static_cast<int>(min(equal_seen, keep_equal));
  for (int i = begin; i < end; ++i) {
    const unsigned key = OrderedKey(scores[i]);
    if (key > threshold) {
      kept[out++] = i;
    } else if (key == threshold) {
      if (equal_seen < keep_equal) kept[out++] = i;
      ++equal_seen;
    }
  }
}

}  // namespace

KernelStatus StableTopK(const float* scores, int n, int k, int* kept, Stream stream) {
  if (scores == nullptr || (kept == nullptr && k > 0) || n <= 0 || k < 0 || k > n) {
    return KernelStatus::Error("StableTopK: bad arguments (n=" + std::to_string(n) +
                               " k=" + std::to_string(k) + ")");
  }
  if (k == 0) return KernelStatus::Ok();
  const int threads = n < kMaxThreads ? static_cast<int>(CeilDiv(n, 32)) * 32 : kMaxThreads;
  return Launch("StableTopKKernel", StableTopKKernel, dim3(1), dim3(threads), 0, stream, scores, n,
                k, kept);
}

}  // namespace hap::cuda
