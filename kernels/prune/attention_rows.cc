// CPU reference of TextVisualAttention: one (head, text row) pair per work item.
#include "kernels/prune/attention_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/common/thread_pool.h"

namespace hap::kernels {
namespace {

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

}  // namespace

absl::Status TextVisualAttention(const TextVisualAttentionArgs& a) {
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
  const int64_t q_stride = a.q_stride ? a.q_stride : int64_t{a.n_heads} * a.head_dim;
  const int64_t k_stride = a.k_stride ? a.k_stride : int64_t{a.n_kv_heads} * a.head_dim;
  const int64_t lse_stride = a.lse_stride ? a.lse_stride : a.n_text;
  if (q_stride < int64_t{a.n_heads} * a.head_dim || k_stride < int64_t{a.n_kv_heads} * a.head_dim ||
      lse_stride < a.n_text) {
    return absl::InvalidArgumentError("TextVisualAttention: a stride is smaller than its row");
  }
  if (!std::isfinite(a.scale)) {
    return absl::InvalidArgumentError("TextVisualAttention: scale is not finite");
  }

  const int group = a.n_heads / a.n_kv_heads;
  const int64_t n_items = int64_t{a.n_heads} * a.n_text;
  DefaultPool().ParallelFor(n_items, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int h = static_cast<int>(item / a.n_text);
      const int j = static_cast<int>(item % a.n_text);
      const float* q = a.q_text + j * q_stride + int64_t{h} * a.head_dim;
      const float* k0 = a.k_vis + int64_t{h / group} * a.head_dim;
      float* row = a.out + item * a.n_vis;  // F32 [n_vis]
      for (int i = 0; i < a.n_vis; ++i) row[i] = a.scale * Dot(q, k0 + i * k_stride, a.head_dim);
      if (a.renormalize) {
        const float mx = *std::max_element(row, row + a.n_vis);
        double sum = 0.0;
        for (int i = 0; i < a.n_vis; ++i) {
          row[i] = std::exp(row[i] - mx);
          sum += row[i];
        }
        const float inv = static_cast<float>(1.0 / sum);  // sum ≥ 1: the max term is exp(0)
        for (int i = 0; i < a.n_vis; ++i) row[i] *= inv;
      } else {
        const float lse = a.lse[int64_t{h} * lse_stride + j];
        for (int i = 0; i < a.n_vis; ++i) row[i] = std::exp(row[i] - lse);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace hap::kernels
