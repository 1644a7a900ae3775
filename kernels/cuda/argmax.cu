#include "kernels/cuda/argmax.h"

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/reduce.cuh"

namespace hap::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kNoIndex = 0x7fffffff;  // loses every tie: the pair of a thread with no element

// Butterfly over the warp: every lane ends with the same pair, since ArgMaxPair is a strict
// order on (value desc, index asc) for the non-NaN values that reach it.
__device__ __forceinline__ void WarpArgMax(float& v, int& i) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, v, offset);
    const int oi = __shfl_xor_sync(kFullMask, i, offset);
    ArgMaxPair(v, i, ov, oi);
  }
}

// One block per row (blockIdx.x).
__global__ void ArgMaxRowsKernel(const float* logits, int n, int* out) {
  HAP_SHARED(float, warp_v, 32);
  HAP_SHARED(int, warp_i, 32);
  const float* x = logits + static_cast<int64_t>(blockIdx.x) * n;  // F32 [n]
  float v = -INFINITY;
  int i = kNoIndex;
  for (int c = threadIdx.x; c < n; c += blockDim.x) ArgMaxPair(v, i, x[c], c);
  WarpArgMax(v, i);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    warp_v[warp] = v;
    warp_i[warp] = i;
  }
  __syncthreads();
  if (warp != 0) return;
  const bool has = lane < static_cast<int>(blockDim.x / 32);
  v = has ? warp_v[lane] : -INFINITY;
  i = has ? warp_i[lane] : kNoIndex;
  WarpArgMax(v, i);
  // std::max_element never replaces a NaN first element (every comparison with it is false).
  if (lane == 0) out[blockIdx.x] = (i == kNoIndex || x[0] != x[0]) ? 0 : i;
}

}  // namespace

KernelStatus ArgMaxRows(const float* logits, int rows, int n, int* out, Stream stream) {
  if (logits == nullptr || out == nullptr || rows < 0 || n <= 0) {
    return KernelStatus::Error("ArgMaxRows: null pointer or bad shape");
  }
  if (rows == 0) return KernelStatus::Ok();
  return Launch("ArgMaxRowsKernel", ArgMaxRowsKernel, dim3(rows), dim3(kThreads), 0, stream, logits,
                n, out);
}

}  // namespace hap::cuda
