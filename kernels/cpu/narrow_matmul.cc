#include "kernels/cpu/narrow_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/bf16_gemm.h"

namespace hap::cpu {
namespace {

// Weight rows in flight together (RB below): one row at a time keeps a single sequential stream,
// which the hardware prefetchers follow best (1.8x the bandwidth of four interleaved rows for one
// x row); with more x rows, four rows share each x load and the kernel is bound by FMAs.
constexpr int kRowsSingle = 1, kRowsBatched = 4;

// Element i of a weight row as F32. Weights sit in a memory-mapped file at whatever offset its
// header gives: read them unaligned.
inline float Widen(const uint8_t* row, DType dtype, int64_t i) {
  if (dtype == DType::kF32) {
    float v;
    std::memcpy(&v, row + 4 * i, sizeof(v));
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, row + 2 * i, sizeof(bits));
  return dtype == DType::kBF16 ? BF16ToF32(bits) : F16ToF32(bits);
}

// Portable path: one widened weight row at a time, dot products in F32.
void RowsPortable(const float* x, int m, int k, const uint8_t* w, DType dtype, int64_t j0,
                  int64_t j1, float* y, int64_t ldy) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(k));
  const int64_t row_bytes = k * static_cast<int64_t>(DTypeSize(dtype));
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* wr = w + j * row_bytes;
    for (int t = 0; t < k; ++t) row[t] = Widen(wr, dtype, t);
    for (int i = 0; i < m; ++i) {
      const float* xr = x + static_cast<int64_t>(i) * k;
      float acc = 0.f;
      for (int t = 0; t < k; ++t) acc += xr[t] * row[t];
      y[i * ldy + j] = acc;
    }
  }
}

// Elements [t, t + 16) of a weight row as F32.
__attribute__((target("avx512f"))) inline __m512 Load16(const uint8_t* row, DType dtype, int t) {
  if (dtype == DType::kF32) return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + t);
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * t));
  if (dtype == DType::kBF16) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  }
  return _mm512_cvtph_ps(raw);
}

// Runs `block` over weight rows [j0, j1) in blocks of RB rows × XB x rows and stores its sums
// into y. A block at the end of either range repeats its last valid row, so the kernels always
// load full blocks; only the nr × nx valid sums are read. block(wr, xr, nr, nx, sum) fills
// sum[r][s] = w row r · x row s for r < nr, s < nx; it is a separate call because each kernel
// needs its own target ISA.
template <int RB, int XB, typename X, typename Block>
void ForEachRowBlock(const X* x, int m, int k, const uint8_t* w, int64_t row_bytes, int64_t j0,
                     int64_t j1, float* y, int64_t ldy, const Block& block) {
  for (int64_t jb = j0; jb < j1; jb += RB) {
    const int nr = static_cast<int>(std::min<int64_t>(RB, j1 - jb));
    const uint8_t* wr[RB];
    for (int r = 0; r < RB; ++r) wr[r] = w + (jb + std::min(r, nr - 1)) * row_bytes;
    for (int ib = 0; ib < m; ib += XB) {
      const int nx = std::min(XB, m - ib);
      const X* xr[XB];
      for (int s = 0; s < XB; ++s) xr[s] = x + static_cast<int64_t>(ib + std::min(s, nx - 1)) * k;
      float sum[RB][XB];
      block(wr, xr, nr, nx, sum);
      for (int r = 0; r < nr; ++r) {
        for (int s = 0; s < nx; ++s) y[static_cast<int64_t>(ib + s) * ldy + jb + r] = sum[r][s];
      }
    }
  }
}

// Picks the block shape for m x rows (see kRowsSingle) and runs `block` over [j0, j1).
template <typename X, typename Block>
void RunRowBlocks(const X* x, int m, int k, const uint8_t* w, int64_t row_bytes, int64_t j0,
                  int64_t j1, float* y, int64_t ldy, const Block& block) {
  if (m == 1) {
    ForEachRowBlock<kRowsSingle, 1>(x, m, k, w, row_bytes, j0, j1, y, ldy, block);
  } else if (m == 2) {
    ForEachRowBlock<kRowsSingle, 2>(x, m, k, w, row_bytes, j0, j1, y, ldy, block);
  } else {
    ForEachRowBlock<kRowsBatched, 2>(x, m, k, w, row_bytes, j0, j1, y, ldy, block);
  }
}

// Sets every (weight row, x row) accumulator of a block to zero.
template <int RB, int XB>
__attribute__((target("avx512f"))) inline void ZeroAccumulators(__m512 (&acc)[RB][XB]) {
  for (auto& a : acc)
    for (auto& v : a) v = _mm512_setzero_ps();
}

// AVX-512 block for F32 and F16 weights: 16 lanes per FMA; the k % 16 tail is scalar. Each
// (weight row, x row) pair has its own accumulator, so its result does not depend on RB, XB or
// on which rows share the block.
template <int RB, int XB>
__attribute__((target("avx512f"))) void BlockAvx512(const uint8_t* const (&wr)[RB],
                                                    const float* const (&xr)[XB], int nr, int nx,
                                                    int k, DType dtype, float (&sum)[RB][XB]) {
  const int k16 = k & ~15;
  __m512 acc[RB][XB];
  ZeroAccumulators(acc);
  for (int t = 0; t < k16; t += 16) {
    __m512 xv[XB];
    for (int s = 0; s < XB; ++s) xv[s] = _mm512_loadu_ps(xr[s] + t);
    for (int r = 0; r < RB; ++r) {
      const __m512 wv = Load16(wr[r], dtype, t);
      for (int s = 0; s < XB; ++s) acc[r][s] = _mm512_fmadd_ps(wv, xv[s], acc[r][s]);
    }
  }
  for (int r = 0; r < nr; ++r) {
    for (int s = 0; s < nx; ++s) {
      float dot = _mm512_reduce_add_ps(acc[r][s]);
      for (int t = k16; t < k; ++t) dot += xr[s][t] * Widen(wr[r], dtype, t);
      sum[r][s] = dot;
    }
  }
}

// BF16 weights, 32 per load: interleaving 16-bit zeros below each element (unpacklo/unpackhi
// with zero) makes every element its exact F32 value, one instruction per 16, in this order
// within each 32-element chunk; x is permuted the same way once per call (xp), so each product
// pairs the right values.
constexpr int kBf16Order[32] = {0, 1, 2, 3, 8,  9,  10, 11, 16, 17, 18, 19, 24, 25, 26, 27,
                                4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};

void PermuteForBf16(const float* x, int m, int k, float* xp) {
  const int k32 = k & ~31;
  for (int i = 0; i < m; ++i) {
    const float* src = x + static_cast<int64_t>(i) * k;
    float* dst = xp + static_cast<int64_t>(i) * k;
    for (int t = 0; t < k32; t += 32) {
      for (int l = 0; l < 32; ++l) dst[t + l] = src[t + kBf16Order[l]];
    }
    for (int t = k32; t < k; ++t) dst[t] = src[t];
  }
}

template <int RB, int XB>
__attribute__((target("avx512f,avx512bw"))) void BlockBf16Avx512(const uint8_t* const (&wr)[RB],
                                                                 const float* const (&xr)[XB],
                                                                 int nr, int nx, int k,
                                                                 float (&sum)[RB][XB]) {
  const int k32 = k & ~31;
  const __m512i zero = _mm512_setzero_si512();
  __m512 lo[RB][XB], hi[RB][XB];
  ZeroAccumulators(lo);
  ZeroAccumulators(hi);
  for (int t = 0; t < k32; t += 32) {
    __m512 xlo[XB], xhi[XB];
    for (int s = 0; s < XB; ++s) {
      xlo[s] = _mm512_loadu_ps(xr[s] + t);
      xhi[s] = _mm512_loadu_ps(xr[s] + t + 16);
    }
    for (int r = 0; r < RB; ++r) {
      const __m512i raw = _mm512_loadu_si512(wr[r] + 2 * t);
      const __m512 wlo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, raw));
      const __m512 whi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, raw));
      for (int s = 0; s < XB; ++s) {
        lo[r][s] = _mm512_fmadd_ps(wlo, xlo[s], lo[r][s]);
        hi[r][s] = _mm512_fmadd_ps(whi, xhi[s], hi[r][s]);
      }
    }
  }
  for (int r = 0; r < nr; ++r) {
    for (int s = 0; s < nx; ++s) {
      float dot = _mm512_reduce_add_ps(_mm512_add_ps(lo[r][s], hi[r][s]));
      for (int t = k32; t < k; ++t) dot += xr[s][t] * Widen(wr[r], DType::kBF16, t);
      sum[r][s] = dot;
    }
  }
}

// BF16 weights on the BF16 dot-product instruction (AVX512-BF16): x rounded to BF16 once per
// call (xb), then per 32 elements one weight load and one VDPBF16PS per (weight row, x row)
// pair — no widening — into that pair's own accumulator, so the result does not depend on RB,
// XB or the rows alongside. The k % 32 tail is scalar on the same rounded values.
template <int RB, int XB>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void BlockBf16Dot(
    const uint8_t* const (&wr)[RB], const uint16_t* const (&xr)[XB], int nr, int nx, int k,
    float (&sum)[RB][XB]) {
  const int k32 = k & ~31;
  __m512 acc[RB][XB];
  ZeroAccumulators(acc);
  for (int t = 0; t < k32; t += 32) {
    __m512bh xv[XB];
    for (int s = 0; s < XB; ++s) xv[s] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xr[s] + t));
    for (int r = 0; r < RB; ++r) {
      const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(wr[r] + 2 * t));
      for (int s = 0; s < XB; ++s) acc[r][s] = _mm512_dpbf16_ps(acc[r][s], wv, xv[s]);
    }
  }
  for (int r = 0; r < nr; ++r) {
    for (int s = 0; s < nx; ++s) {
      float dot = _mm512_reduce_add_ps(acc[r][s]);
      for (int t = k32; t < k; ++t) dot += BF16ToF32(xr[s][t]) * Widen(wr[r], DType::kBF16, t);
      sum[r][s] = dot;
    }
  }
}

// Widens n elements (F16 or BF16) into dst, 16 at a time.
__attribute__((target("avx512f"))) void WidenAvx512(const uint8_t* src, DType dtype, int64_t n,
                                                    float* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, Load16(src, dtype, static_cast<int>(i)));
  for (; i < n; ++i) dst[i] = Widen(src, dtype, i);
}

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

bool HasAvx512Bw() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return has;
}

}  // namespace

void NarrowRowsTimesX(const float* x, int m, int k, const void* w, DType dtype, int64_t j_begin,
                      int64_t j_end, float* y, int64_t ldy) {
  const auto* bytes = static_cast<const uint8_t*>(w);
  const int64_t row_bytes = k * static_cast<int64_t>(DTypeSize(dtype));
  if (dtype == DType::kBF16 && HasBf16DotProduct()) {
    thread_local std::vector<uint16_t> xb;
    xb.resize(static_cast<size_t>(m) * k);
    ConvertFromF32(DType::kBF16, x, xb.data(), xb.size());
    RunRowBlocks(xb.data(), m, k, bytes, row_bytes, j_begin, j_end, y, ldy,
                 [k](const auto& wr, const auto& xr, int nr, int nx, auto& sum) {
                   BlockBf16Dot(wr, xr, nr, nx, k, sum);
                 });
  } else if (dtype == DType::kBF16 && HasAvx512Bw()) {
    thread_local std::vector<float> xp;
    xp.resize(static_cast<size_t>(m) * k);
    PermuteForBf16(x, m, k, xp.data());
    RunRowBlocks(xp.data(), m, k, bytes, row_bytes, j_begin, j_end, y, ldy,
                 [k](const auto& wr, const auto& xr, int nr, int nx, auto& sum) {
                   BlockBf16Avx512(wr, xr, nr, nx, k, sum);
                 });
  } else if (HasAvx512()) {
    RunRowBlocks(x, m, k, bytes, row_bytes, j_begin, j_end, y, ldy,
                 [k, dtype](const auto& wr, const auto& xr, int nr, int nx, auto& sum) {
                   BlockAvx512(wr, xr, nr, nx, k, dtype, sum);
                 });
  } else {
    RowsPortable(x, m, k, bytes, dtype, j_begin, j_end, y, ldy);
  }
}

void WidenRows(const void* w, DType dtype, int k, int64_t j_begin, int64_t j_end, float* dst) {
  const auto* src =
      static_cast<const uint8_t*>(w) + j_begin * k * static_cast<int64_t>(DTypeSize(dtype));
  const int64_t n = (j_end - j_begin) * k;
  if (dtype != DType::kF32 && HasAvx512()) {
    WidenAvx512(src, dtype, n, dst);
  } else {
    ConvertToF32(dtype, src, dst, static_cast<size_t>(n));
  }
}

}  // namespace hap::cpu
