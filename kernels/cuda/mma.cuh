// One warp's tensor-core product, as PTX's mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}
// computes it: D[16, 8] += A[16, 16] · B[16, 8], BF16 or F16 operands, F32 accumulation. Compiled
// by nvcc it is that instruction (sm_80 and later); on the SIMT emulation the warp's lanes pool
// their fragments and each lane computes its own four outputs, so a kernel that puts an element
// in the wrong register gets a wrong result here as on a GPU.
//
// The fragments are those the PTX ISA documents for m16n8k16 with 16-bit operands. With
// g = lane / 4 and t = lane % 4, each 32-bit register holds two elements, the lower index in the
// lower 16 bits:
//   a[0]: A[g][2t, 2t+1]      a[1]: A[g+8][2t, 2t+1]
//   a[2]: A[g][2t+8, 2t+9]    a[3]: A[g+8][2t+8, 2t+9]
//   b[0]: B[2t, 2t+1][g]      b[1]: B[2t+8, 2t+9][g]
//   d[0], d[1]: D[g][2t, 2t+1]    d[2], d[3]: D[g+8][2t, 2t+1]
// Every lane of the warp must call it together.
#pragma once

#include <cstdint>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/dtype.cuh"

namespace hap::cuda {

// Two 16-bit elements in one register, `lo` the one of lower index.
__device__ __forceinline__ uint32_t PackHalves(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

template <bool kBf16>
__device__ __forceinline__ uint16_t RoundHalf(float x) {
  return kBf16 ? F32ToBf16(x) : F32ToF16(x);
}

template <bool kBf16>
__device__ __forceinline__ void Mma16816(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
#if defined(__CUDACC__)
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#else
  // Each lane shows the others where its fragments are; each then reads the A row and B column
  // of its own outputs from their owners' registers, and no lane leaves (and may overwrite its
  // fragments) before every lane has read.
  struct Operands {
    const uint32_t* a;
    const uint32_t* b;
  };
  const Operands mine{a, b};
  const uint64_t* slots = ::hap::simt::WarpExchange(0xffffffffu, ::hap::simt::ToBits(&mine));
  const Operands* lanes[32];
  for (int l = 0; l < 32; ++l) lanes[l] = ::hap::simt::FromBits<const Operands*>(slots[l]);
  const int lane = ::hap::simt::LaneId(), g = lane >> 2, t = lane & 3;
  auto half = [](uint32_t reg, int upper) {
    const uint16_t bits = static_cast<uint16_t>(upper != 0 ? reg >> 16 : reg & 0xFFFFu);
    return kBf16 ? Bf16ToF32(bits) : F16ToF32(bits);
  };
  auto a_at = [&](int row, int k) {
    const Operands* owner = lanes[(row & 7) * 4 + ((k & 7) >> 1)];
    return half(owner->a[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k & 1);
  };
  auto b_at = [&](int k, int n) {
    const Operands* owner = lanes[n * 4 + ((k & 7) >> 1)];
    return half(owner->b[k >= 8 ? 1 : 0], k & 1);
  };
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 16; ++k) acc = std::fma(a_at(row, k), b_at(k, col), acc);
    d[i] = acc;
  }
  ::hap::simt::WarpExchange(0xffffffffu, 0);
#endif
}

}  // namespace hap::cuda
