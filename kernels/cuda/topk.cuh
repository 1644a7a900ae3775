// The stable top-k of at most kRankMax scores by one block, each thread ranking its own score
// (kernels/cuda/topk.h says what the selection is): the body of StableTopKByRankKernel, which
// HapScoring's fused scores-and-selection kernel runs after making the scores itself.
#pragma once

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/select.cuh"

namespace hap::cuda {

constexpr int kRankMax = 1024;

// Thread i holds score x of index i (i < n ≤ kRankMax ≤ blockDim.x; threads at i ≥ n pass any
// value) and finds its rank — the scores above it, and the equal ones at lower indices — by
// comparing it with every score in shared memory; rank < k keeps it, at the position an
// exclusive scan of the kept flags gives. Every thread calls it (it has barriers). A NaN score
// writes −1 to every slot of kept. s: kRankMax shared floats, has_nan: 1 shared int,
// scan_scratch: as BlockExclusiveScan's.
__device__ __forceinline__ void BlockStableTopKByRank(float x, int n, int k, float* s, int* has_nan,
                                                      unsigned long long* scan_scratch, int* kept) {
  const int i = threadIdx.x;
  if (i == 0) has_nan[0] = 0;
  __syncthreads();
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

}  // namespace hap::cuda
