#include "kernels/cpu/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/thread_pool.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/exp_row.h"

namespace hap::cpu {
namespace {

absl::Status Validate(const AttentionArgs& a) {
  if (!a.q || !a.k || !a.v || !a.out || a.n_q < 0 || a.n_kv <= 0 || a.n_heads <= 0 ||
      a.n_kv_heads <= 0 || a.head_dim <= 0 || a.n_heads % a.n_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Attention: bad arguments n_q=%d n_kv=%d heads=%d kv_heads=%d head_dim=%d",
                        a.n_q, a.n_kv, a.n_heads, a.n_kv_heads, a.head_dim));
  }
  if (a.causal && (a.causal_offset < 0 || a.causal_offset + a.n_q > a.n_kv)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Attention: causal offset %d with %d queries exceeds %d keys",
                        a.causal_offset, a.n_q, a.n_kv));
  }
  if (const char* error = a.SegmentError(); *error != 0) return absl::InvalidArgumentError(error);
  for (int s = 0; s < a.n_segments; ++s) {
    const int32_t* b = a.segment_bounds;
    if ((s == 0 && b[0] != 0) || b[s + 1] < b[s] || (s + 1 == a.n_segments && b[s + 1] != a.n_q)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Attention: segment bounds must rise from 0 to n_q = %d; segment %d is [%d, %d)", a.n_q,
          s, b[s], b[s + 1]));
    }
  }
  return absl::OkStatus();
}

// Segment s's rows [bounds[s], bounds[s + 1]): the one segment [0, n_q) without segments.
struct Segments {
  explicit Segments(const AttentionArgs& a)
      : count(a.n_segments > 0 ? a.n_segments : 1), bounds(a.segment_bounds), n_q(a.n_q) {}
  int begin(int s) const { return bounds ? bounds[s] : 0; }
  int end(int s) const { return bounds ? bounds[s + 1] : n_q; }
  int count;
  const int32_t* bounds;
  int n_q;
};

// A task's query rows [r0, r0 + rows), all in one segment, and the keys [key0, key_end) they see.
struct RowBlock {
  int r0, rows, key0, key_end;
};

// A head's width, the row strides of q (and out) and of k and v, and the query heads per kv head.
struct HeadLayout {
  int hd, q_stride, kv_stride, group;
};
HeadLayout LayoutOf(const AttentionArgs& a) {
  return {a.head_dim, a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim, a.n_heads / a.n_kv_heads};
}

// Rows per block: bounds the score buffer at kRowBlock × n_kv floats.
constexpr int kRowBlock = 256;

// x rounded to `type` (BF16 or F16) and widened back: the values a narrow product multiplies.
float RoundTo(DType type, float x) {
  return type == DType::kBF16 ? BF16ToF32(F32ToBF16(x)) : F16ToF32(F32ToF16(x));
}
std::vector<float> RoundedCopy(DType type, const float* x, int64_t n) {
  std::vector<float> out(x, x + n);
  for (float& v : out) v = RoundTo(type, v);
  return out;
}

// args with q, k and v pointing at rounded copies when its operands are narrow (args itself
// otherwise): the products of rounded values are then exact in F32, as on tensor cores.
struct RoundedOperands {
  explicit RoundedOperands(const AttentionArgs& in) : args(in) {
    if (in.operands == DType::kF32) return;
    const int64_t kv_n = int64_t{in.n_kv} * in.n_kv_heads * in.head_dim;
    q = RoundedCopy(in.operands, in.q, int64_t{in.n_q} * in.n_heads * in.head_dim);
    k = RoundedCopy(in.operands, in.k, kv_n);
    v = RoundedCopy(in.operands, in.v, kv_n);
    args.q = q.data();
    args.k = k.data();
    args.v = v.data();
  }
  RoundedOperands(const RoundedOperands&) = delete;
  RoundedOperands& operator=(const RoundedOperands&) = delete;
  AttentionArgs args;
  std::vector<float> q, k, v;
};

}  // namespace

absl::Status Attention(const AttentionArgs& args) {
  if (absl::Status s = Validate(args); !s.ok()) return s;
  if (args.n_q == 0) return absl::OkStatus();
  // Narrow operands: q, k and v rounded once here; the probabilities below, row by row.
  const RoundedOperands rounded(args);
  const AttentionArgs& a = rounded.args;
  const bool narrow = a.operands != DType::kF32;
  // Named copies, not a structured binding: the lambdas below capture them (clang 14 cannot
  // capture a binding).
  const HeadLayout layout = LayoutOf(a);
  const int hd = layout.hd, q_stride = layout.q_stride, kv_stride = layout.kv_stride,
            group = layout.group;
  // Blocks of up to kRowBlock rows within a segment; a segment alone gives the same blocks.
  const Segments seg(a);
  std::vector<RowBlock> blocks;
  for (int s = 0; s < seg.count; ++s) {
    const int key0 = seg.begin(s);
    const int key_end = a.n_segments > 0 ? seg.end(s) : a.n_kv;
    for (int r0 = seg.begin(s); r0 < seg.end(s); r0 += kRowBlock) {
      const int rows = std::min(kRowBlock, seg.end(s) - r0);
      // Keys past the causal limit of the block's last row are never needed.
      blocks.push_back(
          {r0, rows, key0, a.causal ? std::min(key_end, a.causal_offset + r0 + rows) : key_end});
    }
  }
  const int64_t n_blocks = static_cast<int64_t>(blocks.size());
  int widest = 0;
  for (const RowBlock& b : blocks) widest = std::max(widest, b.key_end - b.key0);
  SingleThreadedBlas();
  // Tasks are (head, row block) pairs, spread over the pool; each thread computes its tasks with
  // single-threaded sgemm into its own score buffer.
  DefaultPool().ParallelFor(int64_t{a.n_heads} * n_blocks, [&](int64_t t0, int64_t t1) {
    std::vector<float> scores(static_cast<size_t>(std::min(a.n_q, kRowBlock)) * widest);
    for (int64_t task = t0; task < t1; ++task) {
      const int h = static_cast<int>(task / n_blocks);
      const RowBlock& b = blocks[task % n_blocks];
      const int kvh = h / group;
      const float* k = a.k + static_cast<int64_t>(b.key0) * kv_stride + kvh * hd;
      const float* v = a.v + static_cast<int64_t>(b.key0) * kv_stride + kvh * hd;
      const int n_keys = b.key_end - b.key0;
      // scores[r, j] = scale · q_r · k_(key0 + j)   F32 [rows, n_keys]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b.rows, n_keys, hd, a.scale,
                  a.q + static_cast<int64_t>(b.r0) * q_stride + h * hd, q_stride, k, kv_stride, 0.f,
                  scores.data(), n_keys);
      for (int r = 0; r < b.rows; ++r) {
        float* s = scores.data() + static_cast<int64_t>(r) * n_keys;
        const int limit = a.causal ? a.causal_offset + b.r0 + r + 1 - b.key0 : n_keys;
        const auto [mx, sum] = ExpRow(s, limit);
        const float inv = static_cast<float>(1.0 / sum);
        for (int j = 0; j < limit; ++j) s[j] *= inv;
        if (narrow) {
          for (int j = 0; j < limit; ++j) s[j] = RoundTo(a.operands, s[j]);
        }
        for (int j = limit; j < n_keys; ++j) s[j] = 0.f;
        if (a.lse) {
          a.lse[static_cast<int64_t>(h) * a.n_q + b.r0 + r] =
              mx + static_cast<float>(std::log(sum));
        }
      }
      // out[r, h] = Σ_j p[r, j] · v_j   F32 [rows, head_dim] (strided into out)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b.rows, hd, n_keys, 1.f, scores.data(),
                  n_keys, v, kv_stride, 0.f, a.out + static_cast<int64_t>(b.r0) * q_stride + h * hd,
                  q_stride);
    }
  });
  return absl::OkStatus();
}

void AttentionReference(const AttentionArgs& args) {
  const RoundedOperands rounded(args);
  const AttentionArgs& a = rounded.args;
  const bool narrow = a.operands != DType::kF32;
  const HeadLayout layout = LayoutOf(a);
  const int hd = layout.hd, q_stride = layout.q_stride, kv_stride = layout.kv_stride,
            group = layout.group;
  const Segments seg(a);
  std::vector<double> s(a.n_kv);
  for (int h = 0; h < a.n_heads; ++h) {
    const int kvh = h / group;
    for (int r = 0, at = 0; r < a.n_q; ++r) {
      while (r >= seg.end(at)) ++at;  // the row's segment (empty ones are passed over)
      const int first = a.n_segments > 0 ? seg.begin(at) : 0;
      const int end = a.n_segments > 0 ? seg.end(at) : a.n_kv;
      const int limit = a.causal ? std::min(end, a.causal_offset + r + 1) : end;
      double mx = -std::numeric_limits<double>::infinity();
      for (int j = first; j < limit; ++j) {
        double dot = 0;
        for (int t = 0; t < hd; ++t) {
          dot += static_cast<double>(a.q[static_cast<int64_t>(r) * q_stride + h * hd + t]) *
                 a.k[static_cast<int64_t>(j) * kv_stride + kvh * hd + t];
        }
        s[j] = dot * a.scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int j = first; j < limit; ++j) sum += std::exp(s[j] - mx);
      if (a.lse)
        a.lse[static_cast<int64_t>(h) * a.n_q + r] = static_cast<float>(mx + std::log(sum));
      for (int t = 0; t < hd; ++t) {
        double acc = 0;
        for (int j = first; j < limit; ++j) {
          double p = std::exp(s[j] - mx) / sum;
          if (narrow) p = RoundTo(a.operands, static_cast<float>(p));
          acc += p * a.v[static_cast<int64_t>(j) * kv_stride + kvh * hd + t];
        }
        a.out[static_cast<int64_t>(r) * q_stride + h * hd + t] = static_cast<float>(acc);
      }
    }
  }
}

}  // namespace hap::cpu
