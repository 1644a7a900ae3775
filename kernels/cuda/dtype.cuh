// Element conversions in device code, bit for bit those of base/dtype.cc (round to nearest
// even; NaN, Inf, signed zeros and subnormals kept).
#pragma once

#include "kernels/cuda/device.cuh"

namespace hap::cuda {

__device__ __forceinline__ float Bf16ToF32(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__device__ __forceinline__ float F16ToF32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1Fu;
  const uint32_t mant = bits & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: mant · 2^-24 is exact in F32
    const float magnitude = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return __uint_as_float(__float_as_uint(magnitude) | sign);
  }
  if (exp == 0x1F) return __uint_as_float(sign | 0x7F800000u | (mant << 13));
  return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

__device__ __forceinline__ uint16_t F32ToBf16(float value) {
  const uint32_t x = __float_as_uint(value);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ uint16_t F32ToF16(float value) {
  const uint32_t x = __float_as_uint(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to Inf
  if (abs >= 0x38800000u) {  // a normal F16
    const uint32_t v = abs - 0x38000000u;
    uint32_t q = v >> 13;
    const uint32_t rem = v & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  if (abs <= 0x33000000u) return sign;  // rounds to zero
  const uint32_t e = abs >> 23;         // a subnormal F16: round(|value| / 2^-24)
  const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - e;
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

// Element i of a tensor of `type` as F32.
__device__ __forceinline__ float LoadAsF32(const void* data, int64_t i, ElemType type) {
  switch (type) {
    case ElemType::kBF16:
      return Bf16ToF32(static_cast<const uint16_t*>(data)[i]);
    case ElemType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

}  // namespace hap::cuda
