// Warp and block reductions shared by the kernels (sums, maxima, arg-maxima).
#pragma once

#include "kernels/cuda/device.cuh"

namespace hap::cuda {

inline constexpr unsigned kFullMask = 0xffffffffu;

// Every lane gets the sum of the warp's 32 values (butterfly: the same order on every lane).
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

// Every thread of the block gets the block's sum. blockDim.x must be a multiple of 32 (at most
// 1024); scratch is 32 floats of shared memory, free again when this returns.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int n_warps = blockDim.x / 32;
  v = WarpSum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = WarpSum(lane < n_warps ? scratch[lane] : 0.f);
  __syncthreads();
  return v;
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int n_warps = blockDim.x / 32;
  v = WarpMax(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = WarpMax(lane < n_warps ? scratch[lane] : -INFINITY);
  __syncthreads();
  return v;
}

// The larger of two (value, index) pairs; equal values go to the lower index. NaN loses.
__device__ __forceinline__ void ArgMaxPair(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i) || (v != v && ov == ov)) {
    v = ov;
    i = oi;
  }
}

}  // namespace hap::cuda
