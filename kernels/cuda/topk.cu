#include <string>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/select.cuh"
#include "kernels/cuda/topk.cuh"
#include "kernels/cuda/topk.h"

namespace hap::cuda {
namespace {

constexpr int kMaxThreads = 1024;

// One block; k ≥ 1.
__global__ void StableTopKKernel(const float* scores, int n, int k, int* kept) {
  HAP_SHARED(unsigned, hist, kSelectBuckets);
  HAP_SHARED(unsigned, chosen, 2);  // BlockRadixSelect's state
  HAP_SHARED(int, has_nan, 1);
  HAP_SHARED(unsigned long long, scan_scratch, 32);
  const int slice = (n + blockDim.x - 1) / blockDim.x;
  const int begin = min(n, static_cast<int>(threadIdx.x) * slice);
  const int end = min(n, begin + slice);

  if (threadIdx.x == 0) has_nan[0] = 0;
  __syncthreads();
  for (int i = begin; i < end; ++i) {
    if (scores[i] != scores[i]) has_nan[0] = 1;  // every writer stores the same value
  }
  __syncthreads();
  if (has_nan[0] != 0) {  // uniform: every thread leaves here
    for (int i = threadIdx.x; i < k; i += blockDim.x) kept[i] = -1;
    return;
  }

  // Radix select of the k-th largest key (the threshold) and of how many scores with that key
  // are kept, lowest index first.
  const SelectedKey kth =
      BlockRadixSelect(scores, begin, end, 1, static_cast<unsigned>(k), hist, chosen);
  const unsigned threshold = kth.key;
  const unsigned keep_equal = kth.keep_equal;

  // Output offsets: (count above, count equal) of the slices before this one.
  const SliceOffset at = SliceOutputOffset(scores, begin, end, kth, scan_scratch);
  unsigned equal_seen = at.equal_seen;
  int out = at.out;
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

// n ≤ kRankMax: one pass, no select (BlockStableTopKByRank): a few microseconds where the radix
// select's seven passes take tens.
__global__ void StableTopKByRankKernel(const float* scores, int n, int k, int* kept) {
  HAP_SHARED(float, s, kRankMax);
  HAP_SHARED(int, has_nan, 1);
  HAP_SHARED(unsigned long long, scan_scratch, 32);
  const int i = threadIdx.x;
  BlockStableTopKByRank(i < n ? scores[i] : 0.f, n, k, s, has_nan, scan_scratch, kept);
}

}  // namespace

KernelStatus StableTopK(const float* scores, int n, int k, int* kept, Stream stream) {
  if (scores == nullptr || (kept == nullptr && k > 0) || n <= 0 || k < 0 || k > n) {
    return KernelStatus::Error("StableTopK: bad arguments (n=" + std::to_string(n) +
                               " k=" + std::to_string(k) + ")");
  }
  if (k == 0) return KernelStatus::Ok();
  if (n <= kRankMax) {
    return Launch("StableTopKByRankKernel", StableTopKByRankKernel, dim3(1),
                  dim3(static_cast<int>(CeilDiv(n, 32)) * 32), 0, stream, scores, n, k, kept);
  }
  const int threads = n < kMaxThreads ? static_cast<int>(CeilDiv(n, 32)) * 32 : kMaxThreads;
  return Launch("StableTopKKernel", StableTopKKernel, dim3(1), dim3(threads), 0, stream, scores, n,
                k, kept);
}

}  // namespace hap::cuda
