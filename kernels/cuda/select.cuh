// Pieces of the radix selects (topk.cu, top_logits.cu): the order-preserving key of a float and
// a block-wide exclusive scan that hands each thread's slice its output offset.
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

}  // namespace hap::cuda
