#include "kernels/cpu/narrow_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace hap::cpu {
namespace {

constexpr int kRowBlock = 4;  // weight rows in flight together
constexpr int kXBlock = 2;    // x rows per pass over them (8 independent accumulators)

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

// AVX-512 path: blocks of kRowBlock weight rows × kXBlock x rows, 16 lanes per FMA; the k % 16
// tail is scalar.
__attribute__((target("avx512f"))) void RowsAvx512(const float* x, int m, int k,
                                                    const uint8_t* w, DType dtype, int64_t j0,
                                                    int64_t j1, float* y, int64_t ldy) {
  const int64_t row_bytes = k * static_cast<int64_t>(DTypeSize(dtype));
  const int k16 = k & ~15;
  for (int64_t jb = j0; jb < j1; jb += kRowBlock) {
    const int nr = static_cast<int>(std::min<int64_t>(kRowBlock, j1 - jb));
    const uint8_t* wr[kRowBlock];
    for (int r = 0; r < kRowBlock; ++r) wr[r] = w + (jb + std::min(r, nr - 1)) * row_bytes;
    for (int ib = 0; ib < m; ib += kXBlock) {
      const int nx = std::min(kXBlock, m - ib);
      const float* xr[kXBlock];
      for (int s = 0; s < kXBlock; ++s) xr[s] = x + static_cast<int64_t>(ib + std::min(s, nx - 1)) * k;
      __m512 acc[kRowBlock][kXBlock];
      for (auto& a : acc)
        for (auto& v : a) v = _mm512_setzero_ps();
      for (int t = 0; t < k16; t += 16) {
        const __m512 x0 = _mm512_loadu_ps(xr[0] + t);
        const __m512 x1 = _mm512_loadu_ps(xr[1] + t);
        for (int r = 0; r < kRowBlock; ++r) {
          const __m512 wv = Load16(wr[r], dtype, t);
          acc[r][0] = _mm512_fmadd_ps(wv, x0, acc[r][0]);
          acc[r][1] = _mm512_fmadd_ps(wv, x1, acc[r][1]);
        }
      }
      for (int r = 0; r < nr; ++r) {
        for (int s = 0; s < nx; ++s) {
          float sum = _mm512_reduce_add_ps(acc[r][s]);
          for (int t = k16; t < k; ++t) sum += xr[s][t] * Widen(wr[r], dtype, t);
          y[static_cast<int64_t>(ib + s) * ldy + jb + r] = sum;
        }
      }
    }
  }
}

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

}  // namespace

void NarrowRowsTimesX(const float* x, int m, int k, const void* w, DType dtype, int64_t j_begin,
                      int64_t j_end, float* y, int64_t ldy) {
  const auto* bytes = static_cast<const uint8_t*>(w);
  if (HasAvx512()) {
    RowsAvx512(x, m, k, bytes, dtype, j_begin, j_end, y, ldy);
  } else {
    RowsPortable(x, m, k, bytes, dtype, j_begin, j_end, y, ldy);
  }
}

void WidenRows(const void* w, DType dtype, int k, int64_t j_begin, int64_t j_end, float* dst) {
  const auto* src =
      static_cast<const uint8_t*>(w) + j_begin * k * static_cast<int64_t>(DTypeSize(dtype));
  ConvertToF32(dtype, src, dst, static_cast<size_t>((j_end - j_begin) * k));
}

bool NarrowMatmulUsesAvx512() { return HasAvx512(); }

}  // namespace hap::cpu
