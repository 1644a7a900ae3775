// Pieces of the radix selects (topk.cu, top_logits.cu): the order-preserving key of a float, the
// block-wide radix select of the k-th largest key, and a block-wide exclusive scan that hands each
// thread's slice its output offset (SliceOutputOffset).
#pragma once

#include "kernels/cuda/device.cuh"

namespace hap::cuda {

// A key whose unsigned order is the floats' order: positive floats get the sign bit set,
// negative ones are inverted; −0 is first made +0, since the references' == treats them as one.
// NaN has no place in the order: callers check for it first.
__device__ __forceinline__ unsigned OrderedKey(float x) {
  const unsigned b = x == 0.f ? 0u : __float_as_uint(x);
  return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}

// The radix select's digits: kSelectRadixBits bits, one histogram of kSelectBuckets a digit.
constexpr int kSelectRadixBits = 8;
constexpr int kSelectBuckets = 1 << kSelectRadixBits;

// The k-th largest of the block's keys and how many keys equal to it are among the k largest.
struct SelectedKey {
  unsigned key;
  unsigned keep_equal;
};

// Block-wide radix select of the k-th largest OrderedKey of x[0, n), most significant digit first.
// Each thread counts x[i] for i = begin, begin + stride, … < end; the threads' ranges together
// must cover every index once (the histograms do not depend on which thread counts which value).
// 1 ≤ k ≤ n and no NaN in x. Every thread of the block calls it (it has barriers) and gets the
// same result. hist: kSelectBuckets shared values, chosen: 2 shared values (the key prefix chosen
// so far, how many to keep in it); neither needs a value on entry.
__device__ __forceinline__ SelectedKey BlockRadixSelect(const float* x, int begin, int end,
                                                        int stride, unsigned k, unsigned* hist,
                                                        unsigned* chosen) {
  if (threadIdx.x == 0) {
    chosen[0] = 0u;
    chosen[1] = k;
  }
  unsigned prefix = 0u, prefix_mask = 0u;
  for (int shift = 32 - kSelectRadixBits; shift >= 0; shift -= kSelectRadixBits) {
    for (int b = threadIdx.x; b < kSelectBuckets; b += blockDim.x) hist[b] = 0u;
    __syncthreads();
    for (int i = begin; i < end; i += stride) {
      const unsigned key = OrderedKey(x[i]);
      if ((key & prefix_mask) == prefix) {
        atomicAdd(&hist[(key >> shift) & (kSelectBuckets - 1)], 1u);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // The bucket holding the remaining rank-th largest of the candidates (rank ≥ 1 and at most
      // their count, so the walk stops at a bucket ≥ 0).
      unsigned rank = chosen[1];
      int b = kSelectBuckets - 1;
      while (hist[b] < rank) rank -= hist[b--];
      chosen[0] = prefix | (static_cast<unsigned>(b) << shift);
      chosen[1] = rank;
    }
    __syncthreads();
    prefix = chosen[0];
    prefix_mask |= static_cast<unsigned>(kSelectBuckets - 1) << shift;
  }
  return SelectedKey{prefix, chosen[1]};
}

// Exclusive prefix sum over the block's threads in thread order; scratch: 32 shared values,
// free again on return. blockDim.x a multiple of 32.
__device__ __forceinline__ unsigned long long BlockExclusiveScan(unsigned long long v,
                                                                 unsigned long long* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int n_warps = blockDim.x / 32;
  unsigned long long inclusive = v;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const unsigned long long up = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += up;
  }
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const unsigned long long total = lane < n_warps ? scratch[lane] : 0ull;
    unsigned long long prefix = total;
    for (int offset = 1; offset < 32; offset <<= 1) {
      const unsigned long long up = __shfl_up_sync(0xffffffffu, prefix, offset);
      if (lane >= offset) prefix += up;
    }
    if (lane < n_warps) scratch[lane] = prefix - total;  // exclusive over the warps
  }
  __syncthreads();
  const unsigned long long result = scratch[warp] + inclusive - v;
  __syncthreads();
  return result;
}

// Where the values that a select kept (keys above kth.key, and the first kth.keep_equal with that
// key in index order) from this thread's contiguous slice x[begin, end) start in an output in
// index order, and how many values with kth.key the slices before this one hold. The threads'
// slices in thread order must cover x in index order. Every thread of the block calls it (it has
// barriers); scan_scratch as for BlockExclusiveScan.
struct SliceOffset {
  int out;
  unsigned equal_seen;
};
__device__ __forceinline__ SliceOffset SliceOutputOffset(const float* x, int begin, int end,
                                                         SelectedKey kth,
                                                         unsigned long long* scan_scratch) {
  unsigned above = 0u, equal = 0u;
  for (int i = begin; i < end; ++i) {
    const unsigned key = OrderedKey(x[i]);
    above += key > kth.key;
    equal += key == kth.key;
  }
  const unsigned long long before =
      BlockExclusiveScan((static_cast<unsigned long long>(above) << 32) | equal, scan_scratch);
  const unsigned equal_seen = static_cast<unsigned>(before & 0xffffffffull);
  return SliceOffset{
      static_cast<int>(before >> 32) + static_cast<int>(min(equal_seen, kth.keep_equal)),
      equal_seen};
}

}  // namespace hap::cuda
