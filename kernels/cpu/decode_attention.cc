#include "kernels/cpu/decode_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/thread_pool.h"
#include "kernels/cpu/exp_row.h"
#include "kernels/op_checks.h"

namespace hap::cpu {
namespace {

// Element t of a cache row of `dtype` (F32 or BF16), as F32.
inline float At(const void* row, DType dtype, int64_t t) {
  if (dtype == DType::kF32) return static_cast<const float*>(row)[t];
  uint16_t bits;
  std::memcpy(&bits, static_cast<const uint16_t*>(row) + t, sizeof(bits));
  return BF16ToF32(bits);
}

// `n` elements of a cache row as F32: the row itself when it is F32, else widened into scratch.
inline const float* AsF32(const void* row, DType dtype, int n, float* scratch) {
  if (dtype == DType::kF32) return static_cast<const float*>(row);
  ConvertToF32(DType::kBF16, row, scratch, static_cast<size_t>(n));
  return scratch;
}

// q·k in a fixed order that the compiler can vectorise without reassociating: 16 lane sums
// over t ≡ lane (mod 16), then the lanes added pairwise, then the tail.
inline float Dot(const float* q, const float* k, int n) {
  constexpr int kLanes = 16;
  float lane[kLanes] = {};
  const int n16 = n - n % kLanes;
  for (int t = 0; t < n16; t += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] += q[t + l] * k[t + l];
  }
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) lane[l] += lane[l + w];
  }
  float dot = lane[0];
  for (int t = n16; t < n; ++t) dot += q[t] * k[t];
  return dot;
}

// The same two operations with AVX-512 (FMA, 16 lanes) where the CPU has it. A process always
// takes one of the two paths, so results stay split- and batch-invariant within it.
__attribute__((target("avx512f"))) float DotAvx512(const float* q, const float* k, int n) {
  __m512 acc = _mm512_setzero_ps();
  const int n16 = n - n % 16;
  for (int t = 0; t < n16; t += 16) {
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + t), _mm512_loadu_ps(k + t), acc);
  }
  float dot = _mm512_reduce_add_ps(acc);
  for (int t = n16; t < n; ++t) dot += q[t] * k[t];
  return dot;
}

// acc += p · v over n elements.
inline void Axpy(float p, const float* v, float* acc, int n) {
  for (int t = 0; t < n; ++t) acc[t] += p * v[t];
}

// The n % 16 tail is one masked FMA, not a scalar loop: the compiler would vectorise such a loop
// behind a run-time overlap check of acc and v, and its vector and scalar versions round
// differently (fused or not), so the result would depend on where the buffers happen to lie.
__attribute__((target("avx512f"))) void AxpyAvx512(float p, const float* v, float* acc, int n) {
  const __m512 pv = _mm512_set1_ps(p);
  const int n16 = n - n % 16;
  for (int t = 0; t < n16; t += 16) {
    _mm512_storeu_ps(acc + t, _mm512_fmadd_ps(pv, _mm512_loadu_ps(v + t), _mm512_loadu_ps(acc + t)));
  }
  if (n16 < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - n16)) - 1);
    _mm512_mask_storeu_ps(acc + n16, tail,
                          _mm512_fmadd_ps(pv, _mm512_maskz_loadu_ps(tail, v + n16),
                                          _mm512_maskz_loadu_ps(tail, acc + n16)));
  }
}

// Elements [t, t + 16) of a cache row as F32 (BF16 widened exactly, as AsF32 does).
__attribute__((target("avx512f"), always_inline)) inline __m512 Load16(const uint8_t* row,
                                                                        DType dtype, int t) {
  if (dtype == DType::kF32) return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + t);
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * t));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

// Softmax of s[0, n) in place, up to the factor returned: s_j = exp(s_j − max), result
// 1 / Σ_j s_j (summed in F64).
inline float ExpAndInverseSum(float* s, int n) {
  return static_cast<float>(1.0 / ExpRow(s, n).sum);
}

// One head with head_dim = 16·NB: q and the output accumulator live in registers across rows,
// rows are read in place (BF16 widened in registers). The arithmetic is DotAvx512's and
// AxpyAvx512's, operation for operation (one FMA chain over the 16-lane blocks in order, then
// the lane reduction; out += p·v per element), so it gives the general path's results, only
// without a call, a q reload and an accumulator load/store per row.
template <int NB>
__attribute__((target("avx512f"))) void HeadInRegisters(const DecodeAttentionArgs& a, int h,
                                                        int kvh, int n_rows, float* s) {
  const int hd = 16 * NB;
  const int64_t kv_stride = int64_t{a.n_kv_heads} * hd;
  const size_t elem = DTypeSize(a.kv_dtype);
  __m512 q[NB];
  for (int b = 0; b < NB; ++b) q[b] = _mm512_loadu_ps(a.q + int64_t{h} * hd + 16 * b);
  int j = 0;
  for (int i = 0; i < a.n_spans; ++i) {
    const auto* k = static_cast<const uint8_t*>(a.spans[i].k) + int64_t{kvh} * hd * elem;
    for (int r = 0; r < a.spans[i].rows; ++r, ++j) {
      const uint8_t* kr = k + r * kv_stride * static_cast<int64_t>(elem);
      __m512 acc = _mm512_setzero_ps();
      for (int b = 0; b < NB; ++b) acc = _mm512_fmadd_ps(q[b], Load16(kr, a.kv_dtype, 16 * b), acc);
      s[j] = _mm512_reduce_add_ps(acc) * a.scale;
    }
  }
  const float inv = ExpAndInverseSum(s, n_rows);
  __m512 out[NB];
  for (int b = 0; b < NB; ++b) out[b] = _mm512_setzero_ps();
  j = 0;
  for (int i = 0; i < a.n_spans; ++i) {
    const auto* v = static_cast<const uint8_t*>(a.spans[i].v) + int64_t{kvh} * hd * elem;
    for (int r = 0; r < a.spans[i].rows; ++r, ++j) {
      const uint8_t* vr = v + r * kv_stride * static_cast<int64_t>(elem);
      const __m512 p = _mm512_set1_ps(s[j] * inv);
      for (int b = 0; b < NB; ++b) out[b] = _mm512_fmadd_ps(p, Load16(vr, a.kv_dtype, 16 * b), out[b]);
    }
  }
  for (int b = 0; b < NB; ++b) _mm512_storeu_ps(a.out + int64_t{h} * hd + 16 * b, out[b]);
}

using HeadFn = void (*)(const DecodeAttentionArgs&, int, int, int, float*);
constexpr HeadFn kHeadInRegisters[9] = {nullptr,
                                        HeadInRegisters<1>,
                                        HeadInRegisters<2>,
                                        HeadInRegisters<3>,
                                        HeadInRegisters<4>,
                                        HeadInRegisters<5>,
                                        HeadInRegisters<6>,
                                        HeadInRegisters<7>,
                                        HeadInRegisters<8>};

bool UseAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

}  // namespace

absl::Status DecodeAttention(const DecodeAttentionArgs& batch) {
  if (absl::Status s = ValidateDecodeAttention(batch); !s.ok()) return s;
  const int hd = batch.head_dim;
  const int kv_stride = batch.n_kv_heads * hd;
  const int group = batch.n_heads / batch.n_kv_heads;
  const size_t elem = DTypeSize(batch.kv_dtype);
  std::vector<DecodeAttentionArgs> seqs(batch.n_seqs);
  std::vector<int> seq_rows(batch.n_seqs, 0);
  int max_rows = 0;
  for (int i = 0; i < batch.n_seqs; ++i) {
    seqs[i] = DecodeAttentionSequence(batch, i);
    for (int sp = 0; sp < seqs[i].n_spans; ++sp) seq_rows[i] += seqs[i].spans[sp].rows;
    max_rows = std::max(max_rows, seq_rows[i]);
  }
  const bool avx512 = UseAvx512();

  // head_dim a multiple of 16 up to 128 (every LLaVA-class model) takes the register path.
  const HeadFn in_registers =
      avx512 && hd % 16 == 0 && hd / 16 <= 8 ? kHeadInRegisters[hd / 16] : nullptr;

  // One task per (sequence, head), all in one hand-over to the pool: a batched step does not pay
  // a hand-over per sequence per layer. Each task is what the sequence's head gets alone.
  const int64_t n_tasks = int64_t{batch.n_seqs} * batch.n_heads;
  DefaultPool().ParallelFor(n_tasks, [&](int64_t t0, int64_t t1) {
    std::vector<float> s(max_rows), row(hd), acc(hd);
    for (int64_t t = t0; t < t1; ++t) {
      const DecodeAttentionArgs& a = seqs[t / batch.n_heads];
      const int n_rows = seq_rows[t / batch.n_heads];
      const int64_t h = t % batch.n_heads;
      const int kvh = static_cast<int>(h) / group;
      if (in_registers != nullptr) {
        in_registers(a, static_cast<int>(h), kvh, n_rows, s.data());
        continue;
      }
      const float* q = a.q + h * hd;
      // s_j = scale · q·k_j
      int j = 0;
      for (int i = 0; i < a.n_spans; ++i) {
        const auto* k = static_cast<const uint8_t*>(a.spans[i].k);
        for (int r = 0; r < a.spans[i].rows; ++r, ++j) {
          const float* kr = AsF32(k + (static_cast<int64_t>(r) * kv_stride + kvh * hd) * elem,
                                  a.kv_dtype, hd, row.data());
          s[j] = (avx512 ? DotAvx512(q, kr, hd) : Dot(q, kr, hd)) * a.scale;
        }
      }
      const float inv = ExpAndInverseSum(s.data(), n_rows);
      // out_h = Σ_j p_j v_j, rows in order
      std::fill(acc.begin(), acc.end(), 0.f);
      j = 0;
      for (int i = 0; i < a.n_spans; ++i) {
        const auto* v = static_cast<const uint8_t*>(a.spans[i].v);
        for (int r = 0; r < a.spans[i].rows; ++r, ++j) {
          const float* vr = AsF32(v + (static_cast<int64_t>(r) * kv_stride + kvh * hd) * elem,
                                  a.kv_dtype, hd, row.data());
          const float p = s[j] * inv;
          if (avx512) {
            AxpyAvx512(p, vr, acc.data(), hd);
          } else {
            Axpy(p, vr, acc.data(), hd);
          }
        }
      }
      std::memcpy(a.out + h * hd, acc.data(), sizeof(float) * hd);
    }
  });
  return absl::OkStatus();
}

namespace {

void ReferenceOne(const DecodeAttentionArgs& a) {
  const int hd = a.head_dim;
  const int kv_stride = a.n_kv_heads * hd;
  const int group = a.n_heads / a.n_kv_heads;
  const size_t elem = DTypeSize(a.kv_dtype);
  for (int h = 0; h < a.n_heads; ++h) {
    const int kvh = h / group;
    std::vector<double> s;
    std::vector<const uint8_t*> vrows;
    for (int i = 0; i < a.n_spans; ++i) {
      for (int r = 0; r < a.spans[i].rows; ++r) {
        const int64_t off = (static_cast<int64_t>(r) * kv_stride + kvh * hd) * elem;
        const auto* k = static_cast<const uint8_t*>(a.spans[i].k) + off;
        double dot = 0;
        for (int t = 0; t < hd; ++t) dot += static_cast<double>(a.q[h * hd + t]) * At(k, a.kv_dtype, t);
        s.push_back(dot * a.scale);
        vrows.push_back(static_cast<const uint8_t*>(a.spans[i].v) + off);
      }
    }
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double x : s) sum += std::exp(x - mx);
    for (int t = 0; t < hd; ++t) {
      double acc = 0;
      for (size_t j = 0; j < s.size(); ++j) acc += std::exp(s[j] - mx) / sum * At(vrows[j], a.kv_dtype, t);
      a.out[h * hd + t] = static_cast<float>(acc);
    }
  }
}

}  // namespace

void DecodeAttentionReference(const DecodeAttentionArgs& batch) {
  for (int i = 0; i < batch.n_seqs; ++i) {
    const DecodeAttentionArgs a = DecodeAttentionSequence(batch, i);
    ReferenceOne(a);
  }
}

}  // namespace hap::cpu

namespace hap::cpu {

absl::Status StoreKvRows(const StoreKvRowsArgs& a) {
  if (a.dtype != DType::kF32 && a.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "StoreKvRows: KV rows of %s (F32 or BF16 are stored)", std::string(DTypeName(a.dtype))));
  }
  if (a.n < 0 || a.kv_dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("StoreKvRows: %d rows of %d values", a.n, a.kv_dim));
  }
  if (a.n == 0) return absl::OkStatus();
  if (a.k == nullptr || a.v == nullptr || a.k_dst == nullptr || a.v_dst == nullptr) {
    return absl::InvalidArgumentError("StoreKvRows: null rows or address tables");
  }
  const size_t values = static_cast<size_t>(a.kv_dim);
  for (int i = 0; i < a.n; ++i) {
    ConvertFromF32(a.dtype, a.k + i * values, a.k_dst[i], values);
    ConvertFromF32(a.dtype, a.v + i * values, a.v_dst[i], values);
  }
  return absl::OkStatus();
}

}  // namespace hap::cpu
