#include "kernels/cpu/bf16_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "base/thread_pool.h"

namespace hap::cpu {
namespace {

// x is packed into panels of kMr rows: word (kk, i) of a panel holds the BF16 pair
// x[i, 2kk], x[i, 2kk + 1], so one 64-byte load gives 16 rows' pairs for VDPBF16PS. A
// micro-kernel call multiplies one panel by kNr weight rows, broadcasting each weight row's pair:
// 2 × kNr accumulators (24 of the 32 vector registers). A task is kNc weight rows, which stay
// in the core's L2 cache while every panel passes over them.
constexpr int kMr = 32;
constexpr int kNr = 12;
constexpr int kNc = 8 * kNr;

inline uint32_t LoadPair(const uint16_t* row, int64_t t) {
  uint32_t word;
  std::memcpy(&word, row + t, sizeof(word));
  return word;
}

// Packs rows [0, m) of x into ceil(m / kMr) panels of `pairs` words per row, zero-padded in
// both directions (rows past m, the odd k's missing half).
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void PackX(const float* x, int m, int k,
                                                                  int pairs, uint32_t* panels) {
  const int k32 = k & ~31;
  alignas(64) uint32_t words[16];
  for (int i = 0; i < m; ++i) {
    const float* src = x + static_cast<int64_t>(i) * k;
    uint32_t* dst = panels + static_cast<int64_t>(i / kMr) * pairs * kMr + i % kMr;
    int t = 0;
    for (; t < k32; t += 32) {
      const __m512bh bf = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + t + 16), _mm512_loadu_ps(src + t));
      _mm512_store_si512(words, reinterpret_cast<__m512i>(bf));
      for (int l = 0; l < 16; ++l) dst[static_cast<int64_t>(t / 2 + l) * kMr] = words[l];
    }
    for (; t < k; t += 2) {
      const uint32_t lo = F32ToBF16(src[t]);
      const uint32_t hi = t + 1 < k ? F32ToBF16(src[t + 1]) : 0u;
      dst[static_cast<int64_t>(t / 2) * kMr] = lo | (hi << 16);
    }
  }
  const int padded = (m + kMr - 1) / kMr * kMr;
  for (int i = m; i < padded; ++i) {
    uint32_t* dst = panels + static_cast<int64_t>(i / kMr) * pairs * kMr + i % kMr;
    for (int kk = 0; kk < pairs; ++kk) dst[static_cast<int64_t>(kk) * kMr] = 0;
  }
}

// out[j][i] = Σ_kk dot(panel pair (kk, i), weight row j pair kk) for NR weight rows starting at
// w (row stride k). An odd k's last weight element is paired with a zero, never read past.
template <int NR>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void Micro(const uint32_t* panel, int k,
                                                                  const uint16_t* w,
                                                                  float (*out)[kMr]) {
  __m512 acc[NR][2];
#pragma GCC unroll 12
  for (int j = 0; j < NR; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
  const uint16_t* rows[NR];
#pragma GCC unroll 12
  for (int j = 0; j < NR; ++j) rows[j] = w + static_cast<int64_t>(j) * k;
  const int full = k / 2;
  for (int kk = 0; kk < full; ++kk) {
    const __m512bh a0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(panel + kk * kMr));
    const __m512bh a1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(panel + kk * kMr + 16));
#pragma GCC unroll 12
    for (int j = 0; j < NR; ++j) {
      const __m512bh b = reinterpret_cast<__m512bh>(
          _mm512_set1_epi32(static_cast<int>(LoadPair(rows[j], 2 * int64_t{kk}))));
      acc[j][0] = _mm512_dpbf16_ps(acc[j][0], a0, b);
      acc[j][1] = _mm512_dpbf16_ps(acc[j][1], a1, b);
    }
  }
  if (k % 2 != 0) {
    const __m512bh a0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(panel + full * kMr));
    const __m512bh a1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(panel + full * kMr + 16));
#pragma GCC unroll 12
    for (int j = 0; j < NR; ++j) {
      const __m512bh b =
          reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(rows[j][k - 1])));
      acc[j][0] = _mm512_dpbf16_ps(acc[j][0], a0, b);
      acc[j][1] = _mm512_dpbf16_ps(acc[j][1], a1, b);
    }
  }
#pragma GCC unroll 12
  for (int j = 0; j < NR; ++j) {
    _mm512_storeu_ps(out[j], acc[j][0]);
    _mm512_storeu_ps(out[j] + 16, acc[j][1]);
  }
}

using MicroFn = void (*)(const uint32_t*, int, const uint16_t*, float (*)[kMr]);
constexpr MicroFn kMicro[kNr + 1] = {nullptr,   Micro<1>, Micro<2>,  Micro<3>, Micro<4>,
                                     Micro<5>,  Micro<6>, Micro<7>,  Micro<8>, Micro<9>,
                                     Micro<10>, Micro<11>, Micro<12>};

}  // namespace

bool HasBf16DotProduct() {
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512bf16");
  return has;
}

void Bf16Gemm(const float* x, int m, int k, const uint16_t* w, int n, float* y) {
  if (m <= 0 || n <= 0) return;
  const int pairs = (k + 1) / 2;
  const int n_panels = (m + kMr - 1) / kMr;
  thread_local std::vector<uint32_t> packed;
  packed.resize(static_cast<size_t>(n_panels) * pairs * kMr);
  uint32_t* panels = packed.data();  // the caller's buffer: the pool's threads read it
  DefaultPool().ParallelFor(n_panels, [&](int64_t p0, int64_t p1) {
    const int rows_end = static_cast<int>(std::min<int64_t>(m, p1 * kMr));
    PackX(x + p0 * kMr * static_cast<int64_t>(k), rows_end - static_cast<int>(p0) * kMr, k,
          pairs, panels + p0 * pairs * kMr);
  });
  const int64_t tasks = (n + kNc - 1) / kNc;
  DefaultPool().ParallelFor(tasks, [&](int64_t t0, int64_t t1) {
    float out[kNr][kMr];
    const int64_t j_end = std::min<int64_t>(n, t1 * kNc);
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t c0 = task * kNc, c1 = std::min<int64_t>(j_end, c0 + kNc);
      for (int p = 0; p < n_panels; ++p) {
        const uint32_t* panel = panels + static_cast<int64_t>(p) * pairs * kMr;
        const int rows = std::min(kMr, m - p * kMr);
        for (int64_t j0 = c0; j0 < c1; j0 += kNr) {
          const int nr = static_cast<int>(std::min<int64_t>(kNr, c1 - j0));
          kMicro[nr](panel, k, w + j0 * k, out);
          for (int i = 0; i < rows; ++i) {
            float* dst = y + static_cast<int64_t>(p * kMr + i) * n + j0;
            for (int j = 0; j < nr; ++j) dst[j] = out[j][i];
          }
        }
      }
    }
  });
}

void Bf16GemmReference(const float* x, int m, int k, const uint16_t* w, int n, float* y) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int t = 0; t < k; ++t) {
        acc += static_cast<double>(BF16ToF32(F32ToBF16(x[static_cast<int64_t>(i) * k + t]))) *
               BF16ToF32(w[static_cast<int64_t>(j) * k + t]);
      }
      y[static_cast<int64_t>(i) * n + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace hap::cpu
