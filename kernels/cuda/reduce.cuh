// Warp and block reductions shared by the kernels (sums in F32 and F64, maxima, arg-maxima), and
// the test that lets the last block of a launch finish what all of them made.
#pragma once

#include "kernels/cuda/device.cuh"

namespace hap::cuda {

inline constexpr unsigned kFullMask = 0xffffffffu;

// Whether this block is the last of the n_blocks that count in *count to get here. Every thread
// calls it (it has barriers). What each block wrote before its call is then visible to the last
// block, which reads it through L2 (__ldcg: another block's writes may be stale in its L1). The
// last block sets *count back to 0 at once (every other block has counted), so a count starts at
// 0 for each launch that uses it on the stream.
__device__ __forceinline__ bool LastBlockToArrive(unsigned* count, unsigned n_blocks) {
  HAP_SHARED(int, last, 1);
  __threadfence();  // this block's writes, seen device-wide before it counts
  __syncthreads();
  if (threadIdx.x == 0) {
    last[0] = atomicAdd(count, 1u) == n_blocks - 1;
    if (last[0]) *count = 0;
  }
  __syncthreads();
  if (last[0]) __threadfence();
  return last[0] != 0;
}

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Every lane gets op over the warp's 32 values (butterfly: the same order on every lane).
template <typename Op>
__device__ __forceinline__ float WarpReduce(float v, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Every thread of the block gets op over the block's values. blockDim.x must be a multiple of
// 32 (at most 1024); scratch is 32 floats of shared memory, free again when this returns;
// identity is op's neutral value (0 for a sum, -inf for a max).
template <typename Op>
__device__ __forceinline__ float BlockReduce(float v, float* scratch, float identity, Op op) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int n_warps = blockDim.x / 32;
  v = WarpReduce(v, op);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = WarpReduce(lane < n_warps ? scratch[lane] : identity, op);
  __syncthreads();
  return v;
}

__device__ __forceinline__ float WarpSum(float v) { return WarpReduce(v, SumOp{}); }
__device__ __forceinline__ float WarpMax(float v) { return WarpReduce(v, MaxOp{}); }
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  return BlockReduce(v, scratch, 0.f, SumOp{});
}
__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  return BlockReduce(v, scratch, -INFINITY, MaxOp{});
}

__device__ __forceinline__ double WarpSumF64(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// Every thread gets the block's F64 sum; scratch: 32 doubles of shared memory, free again on
// return. blockDim.x a multiple of 32.
__device__ __forceinline__ double BlockSumF64(double v, double* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  v = WarpSumF64(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = WarpSumF64(lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : 0.0);
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
