// Rotary position embedding's arithmetic as device functions, shared by RopeKernel, RopeTable
// and FlashAttention's RoPE on load (kernels/cuda/rope.h, attention.h), so that all of them
// rotate by the same F32 cos/sin with the same F32 operations, bit for bit.
#pragma once

#include <cstdint>

#include "kernels/cuda/device.cuh"

namespace hap::cuda {

// cos and sin of pair i's angle at `position`: position · θ^(−2i/head_dim), computed in F64 as
// the CPU's reference, then rounded to F32.
__device__ __forceinline__ void RopeCosSin(double position, int i, int head_dim, float theta,
                                           float* cs, float* sn) {
  const double inv_freq = 1.0 / pow(static_cast<double>(theta), (2.0 * i) / head_dim);
  double s, c;
  sincos(position * inv_freq, &s, &c);
  *cs = static_cast<float>(c);
  *sn = static_cast<float>(s);
}

// The pair (a, b) = (x[i], x[i + half]) rotated: x[i] becomes RotatedFirst, x[i + half]
// RotatedSecond. Each product and sum rounded on its own (the _rn intrinsics are never fused
// into an FMA), as the CPU computes them: the same bits in every kernel that rotates, whatever
// nvcc would contract around it.
__device__ __forceinline__ float RotatedFirst(float a, float b, float cs, float sn) {
  return __fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn));
}
__device__ __forceinline__ float RotatedSecond(float a, float b, float cs, float sn) {
  return __fadd_rn(__fmul_rn(b, cs), __fmul_rn(a, sn));
}

}  // namespace hap::cuda
