// TextVisualAttention: each head's logits by cblas_sgemm on strided views of Q and K, written
// straight into the output, then one vectorised exp/softmax pass per row while the head's block
// is in cache; large calls spread heads over the default pool. TextVisualAttentionReference (one
// scalar dot product per element) is the CPU reference it is tested against.
#include "kernels/cpu/prune/attention_rows.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/prune/vec_math.h"
#include "base/thread_pool.h"
#include "kernels/cpu/blas_threads.h"

namespace hap::kernels {
namespace {

// Strides with the defaults resolved.
struct Strides {
  int64_t q, k, lse;
};

absl::Status Validate(const TextVisualAttentionArgs& a, Strides* st) {
  if (a.q_text == nullptr || a.k_vis == nullptr || a.out == nullptr ||
      (!a.renormalize && a.lse == nullptr)) {
    return absl::InvalidArgumentError("TextVisualAttention: null pointer argument");
  }
  if (a.n_text <= 0 || a.n_vis <= 0 || a.n_heads <= 0 || a.n_kv_heads <= 0 || a.head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TextVisualAttention: sizes must be positive (n_text=", a.n_text, " n_vis=", a.n_vis,
        " n_heads=", a.n_heads, " n_kv_heads=", a.n_kv_heads, " head_dim=", a.head_dim, ")"));
  }
  if (a.n_heads % a.n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("TextVisualAttention: n_heads ", a.n_heads,
                                                   " is not a multiple of n_kv_heads ",
                                                   a.n_kv_heads));
  }
  st->q = a.q_stride ? a.q_stride : int64_t{a.n_heads} * a.head_dim;
  st->k = a.k_stride ? a.k_stride : int64_t{a.n_kv_heads} * a.head_dim;
  st->lse = a.lse_stride ? a.lse_stride : a.n_text;
  if (st->q < int64_t{a.n_heads} * a.head_dim || st->k < int64_t{a.n_kv_heads} * a.head_dim ||
      st->lse < a.n_text) {
    return absl::InvalidArgumentError("TextVisualAttention: a stride is smaller than its row");
  }
  if (!std::isfinite(a.scale)) {
    return absl::InvalidArgumentError("TextVisualAttention: scale is not finite");
  }
  if (a.row_entropy != nullptr && !a.renormalize) {
    return absl::InvalidArgumentError("TextVisualAttention: row entropies need renormalize");
  }
  return absl::OkStatus();
}

// Four independent partial sums so the loop is not one serial dependency chain.
float Dot(const float* a, const float* b, int n) {
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// −Σ p ln p of one row by definition (the reference's row entropy).
double RowEntropyReference(const float* p, int n) {
  double h = 0.0;
  for (int i = 0; i < n; ++i) {
    if (p[i] > 0.f) h -= double{p[i]} * std::log(double{p[i]});
  }
  return h;
}

// Lanes of the blocked row reductions below: independent partial results let the compiler
// vectorise reductions it may not reassociate.
constexpr int kLanes = 8;

float RowMax(const float* x, int n) {
  float m[kLanes];
  for (int l = 0; l < kLanes; ++l) m[l] = -std::numeric_limits<float>::infinity();
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) m[l] = x[i + l] > m[l] ? x[i + l] : m[l];
  }
  for (; i < n; ++i) m[0] = x[i] > m[0] ? x[i] : m[0];
  float mx = m[0];
  for (int l = 1; l < kLanes; ++l) mx = m[l] > mx ? m[l] : mx;
  return mx;
}

// x[i] ← e^(x[i] − shift)   F32 [n]
void ExpShifted(float* x, int n, float shift) {
  for (int i = 0; i < n; ++i) x[i] = vec::Exp(x[i] - shift);
}

// In place: x ← softmax(x) over the row. Returns the row's entropy −Σ p ln p = ln Z − Σ p·y with
// y = x − max and Z = Σ e^y, both sums accumulated in F64.
double SoftmaxRow(float* x, int n) {
  const float mx = RowMax(x, n);
  double z[kLanes] = {}, zy[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float y = x[i + l] - mx;
      const float e = vec::Exp(y);
      x[i + l] = e;
      z[l] += e;
      zy[l] += e * y;
    }
  }
  for (; i < n; ++i) {
    const float y = x[i] - mx;
    const float e = vec::Exp(y);
    x[i] = e;
    z[0] += e;
    zy[0] += e * y;
  }
  double sum = 0.0, sum_y = 0.0;
  for (int l = 0; l < kLanes; ++l) {
    sum += z[l];
    sum_y += zy[l];
  }
  const float inv = static_cast<float>(1.0 / sum);  // sum ≥ 1: the max term is e^0
  for (int k = 0; k < n; ++k) x[k] *= inv;
  return std::log(sum) - sum_y / sum;
}

// Multiply-adds of a call from which heads are spread over DefaultPool.
constexpr double kParallelMacs = 1 << 24;

// out = scale · Q_h · K_gᵀ   F32 [n_text, n_vis] (row stride n_vis), from Q_h F32 [n_text,
// head_dim] (row stride st.q) and K_g F32 [n_vis, head_dim] (row stride st.k); BLAS on the
// calling thread (see SingleThreadedBlas), the parallelism comes from DefaultPool across heads.
void HeadLogits(const TextVisualAttentionArgs& a, const Strides& st, const float* q, const float* k,
                float* out) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a.n_text, a.n_vis, a.head_dim, a.scale, q,
              static_cast<int>(st.q), k, static_cast<int>(st.k), 0.f, out, a.n_vis);
}

}  // namespace

absl::Status TextVisualAttention(const TextVisualAttentionArgs& a) {
  Strides st;
  if (absl::Status s = Validate(a, &st); !s.ok()) return s;
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (st.q > kIntMax || st.k > kIntMax) return TextVisualAttentionReference(a);  // BLAS ints

  cpu::SingleThreadedBlas();
  const int group = a.n_heads / a.n_kv_heads;
  const int64_t map_size = int64_t{a.n_text} * a.n_vis;
  auto body = [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      float* out = a.out + h * map_size;  // F32 [n_text, n_vis]: logits, then weights
      HeadLogits(a, st, a.q_text + h * a.head_dim, a.k_vis + h / group * a.head_dim, out);
      for (int j = 0; j < a.n_text; ++j) {
        float* row = out + int64_t{j} * a.n_vis;
        if (a.renormalize) {
          const double entropy = SoftmaxRow(row, a.n_vis);
          if (a.row_entropy != nullptr) a.row_entropy[h * a.n_text + j] = entropy;
        } else {
          ExpShifted(row, a.n_vis, a.lse[h * st.lse + j]);
        }
      }
    }
  };
  // Heads go to the pool only when there is enough work per layer to pay for waking it: at the
  // mid-size benchmark's 11.8M multiply-adds the pool made the benchmark no faster on the loaded
  // 2-core machine (its worker is often not running when the work is handed out).
  const double macs = static_cast<double>(a.n_heads) * a.n_text * a.n_vis * a.head_dim;
  if (macs < kParallelMacs) {
    body(0, a.n_heads);
  } else {
    DefaultPool().ParallelFor(a.n_heads, body);
  }
  return absl::OkStatus();
}

absl::Status TextVisualAttentionReference(const TextVisualAttentionArgs& a) {
  Strides st;
  if (absl::Status s = Validate(a, &st); !s.ok()) return s;
  const int group = a.n_heads / a.n_kv_heads;
  const int64_t n_items = int64_t{a.n_heads} * a.n_text;
  for (int64_t item = 0; item < n_items; ++item) {
    const int h = static_cast<int>(item / a.n_text);
    const int j = static_cast<int>(item % a.n_text);
    const float* q = a.q_text + j * st.q + int64_t{h} * a.head_dim;
    const float* k0 = a.k_vis + int64_t{h / group} * a.head_dim;
    float* row = a.out + item * a.n_vis;  // F32 [n_vis]
    for (int i = 0; i < a.n_vis; ++i) row[i] = a.scale * Dot(q, k0 + i * st.k, a.head_dim);
    if (a.renormalize) {
      const float mx = *std::max_element(row, row + a.n_vis);
      double sum = 0.0;
      for (int i = 0; i < a.n_vis; ++i) {
        row[i] = std::exp(row[i] - mx);
        sum += row[i];
      }
      const float inv = static_cast<float>(1.0 / sum);  // sum ≥ 1: the max term is exp(0)
      for (int i = 0; i < a.n_vis; ++i) row[i] *= inv;
      if (a.row_entropy != nullptr) a.row_entropy[item] = RowEntropyReference(row, a.n_vis);
    } else {
      const float lse = a.lse[int64_t{h} * st.lse + j];
      for (int i = 0; i < a.n_vis; ++i) row[i] = std::exp(row[i] - lse);
    }
  }
  return absl::OkStatus();
}

}  // namespace hap::kernels
