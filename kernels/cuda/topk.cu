#include "kernels/cuda/topk.h"

#include <string>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/select.cuh"

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

// n ≤ kRankMax: thread i owns score i and finds its rank (the scores above it, and the equal
// ones at lower indices) by comparing it with every score in shared memory; rank < k keeps it,
// at the position an exclusive scan of the kept flags gives. One pass, no select: a few
// microseconds where the radix select's seven passes take tens.
constexpr int kRankMax = 1024;

__global__ void StableTopKByRankKernel(const float* scores, int n, int k, int* kept) {
  HAP_SHARED(float, s, kRankMax);
  HAP_SHARED(int, has_nan, 1);
  HAP_SHARED(unsigned long long, scan_scratch, 32);
  const int i = threadIdx.x;
  if (i == 0) has_nan[0] = 0;
  __syncthreads();
  const float x = i < n ? scores[i] : 0.f;
  if (i < n) {
    s[i] = x;
    if (x != x) has_nan[0] = 1;  // every writer stores the same value
  }
  __syncthreads();
  if (has_nan[0] != 0) {  // uniform: every thread leaves here
    for (int j = i; j < k; j += blockDim.x) kept[j] = -1;
    return;
  }
  int rank = 0;
  if (i < n) {
    for (int j = 0; j < n; ++j) {
      const float y = s[j];
      rank += (y > x) || (y == x && j < i);  // −0 and +0 are one value, as OrderedKey makes them
    }
  }
  const bool keep = i < n && rank < k;
  const unsigned long long at = BlockExclusiveScan(keep ? 1ull : 0ull, scan_scratch);
  if (keep) kept[at] = i;
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
