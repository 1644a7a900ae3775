// Table-driven parity harness for the CPU kernels: each case names its op and shapes (odd sizes
// included), compares with a plain reference at atol + rtol·|ref|, reports the worst element,
// and fails on NaN/Inf or on writes into the guard zones around every output buffer.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/decode_attention.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "tests/kernels/attention_args.h"

namespace hap {
namespace {

constexpr int kGuard = 64;
constexpr float kGuardValue = 1234.5f;

// A buffer with guard zones on both sides.
struct Guarded {
  explicit Guarded(size_t n) : buf(n + 2 * kGuard, kGuardValue), n(n) {}
  float* data() { return buf.data() + kGuard; }
  const float* data() const { return buf.data() + kGuard; }
  bool GuardsIntact() const {
    for (int i = 0; i < kGuard; ++i) {
      if (buf[i] != kGuardValue || buf[kGuard + n + i] != kGuardValue) return false;
    }
    return true;
  }
  std::vector<float> buf;
  size_t n;
};

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Compares out against ref; returns a message naming the worst element if out of tolerance.
::testing::AssertionResult Close(const float* out, const float* ref, size_t n, double atol,
                                 double rtol) {
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) {
      return ::testing::AssertionFailure() << "non-finite output at " << i << ": " << out[i];
    }
    const double excess = std::abs(out[i] - ref[i]) - (atol + rtol * std::abs(ref[i]));
    if (i == 0 || excess > worst) {
      worst = excess;
      worst_i = i;
    }
  }
  std::printf("    worst element %zu: got %.8g ref %.8g (|diff| %.3g)\n", worst_i, out[worst_i],
              ref[worst_i], std::abs(out[worst_i] - ref[worst_i]));
  if (worst > 0) {
    return ::testing::AssertionFailure()
           << "element " << worst_i << ": got " << out[worst_i] << " ref " << ref[worst_i];
  }
  return ::testing::AssertionSuccess();
}

struct LinearCase {
  int m, k, n;
  bool bias;
};

TEST(KernelsCpu, LinearMatchesReference) {
  const LinearCase cases[] = {{1, 7, 5, false},     {1, 64, 33, true},   {3, 17, 9, true},
                              {17, 64, 129, false}, {128, 96, 64, true}, {577, 33, 31, true}};
  for (const LinearCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "Linear m=" << c.m << " k=" << c.k << " n=" << c.n);
    auto x = Random(static_cast<size_t>(c.m) * c.k, 1);
    auto w = Random(static_cast<size_t>(c.n) * c.k, 2, 0.3f);
    auto b = Random(c.n, 3);
    Guarded out(static_cast<size_t>(c.m) * c.n);
    std::vector<float> ref(out.n);
    ASSERT_TRUE(
        cpu::Linear(x.data(), w.data(), c.bias ? b.data() : nullptr, out.data(), c.m, c.k, c.n)
            .ok());
    cpu::LinearReference(x.data(), w.data(), c.bias ? b.data() : nullptr, ref.data(), c.m, c.k,
                         c.n);
    EXPECT_TRUE(Close(out.data(), ref.data(), out.n, 1e-4, 1e-4));
    EXPECT_TRUE(out.GuardsIntact());
  }
}

// Weights rounded to `dtype` and kept in it; the reference multiplies the same widened values.
struct StoredWeight {
  std::vector<uint16_t> bits;  // BF16/F16 storage (unused for F32)
  std::vector<float> widened;  // the values the kernel must multiply, as F32
  TensorView view;
};
StoredWeight Store(const std::vector<float>& w, DType dtype, int n, int k) {
  StoredWeight s;
  s.widened = w;
  if (dtype != DType::kF32) {
    s.bits.resize(w.size());
    ConvertFromF32(dtype, w.data(), s.bits.data(), w.size());
    ConvertToF32(dtype, s.bits.data(), s.widened.data(), w.size());
  }
  s.view.data = dtype == DType::kF32 ? static_cast<const void*>(s.widened.data()) : s.bits.data();
  s.view.dtype = dtype;
  s.view.shape = {n, k};
  return s;
}

// Linear on weights as stored (F32, BF16, F16): every path (the narrow kernel up to
// kGemvRowsF32 / kGemvRowsNarrow rows; above, sgemm for F32, Bf16Gemm for BF16 where the CPU has
// it, sgemm on widened tiles otherwise), odd k (the scalar tail) and n (partial row blocks),
// against the double-accumulation reference on the widened weights — on x rounded to BF16 where
// the BF16 dot-product paths run.
TEST(KernelsCpu, LinearOnStoredDtypesMatchesReference) {
  const LinearCase cases[] = {{1, 7, 5, false},       {1, 64, 33, true},    {2, 100, 9, true},
                              {3, 17, 9, true},       {16, 64, 130, false}, {17, 64, 129, true},
                              {40, 1024, 300, false}, {128, 96, 70, true},  {129, 96, 70, false},
                              {577, 33, 31, true}};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const LinearCase& c : cases) {
      SCOPED_TRACE(::testing::Message()
                   << DTypeName(dtype) << " Linear m=" << c.m << " k=" << c.k << " n=" << c.n);
      auto x = Random(static_cast<size_t>(c.m) * c.k, 11);
      StoredWeight w = Store(Random(static_cast<size_t>(c.n) * c.k, 12, 0.3f), dtype, c.n, c.k);
      auto b = Random(c.n, 13);
      Guarded out(static_cast<size_t>(c.m) * c.n);
      std::vector<float> ref(out.n);
      ASSERT_TRUE(cpu::Linear(x.data(), w.view, c.bias ? b.data() : nullptr, out.data(), c.m).ok());
      // BF16 weights on a CPU with AVX512-BF16 multiply BF16-rounded x at every m.
      const bool bf16_dot = dtype == DType::kBF16 && cpu::HasBf16DotProduct();
      std::vector<float> x_used = x;
      if (bf16_dot) {
        for (float& v : x_used) v = BF16ToF32(F32ToBF16(v));
      }
      cpu::LinearReference(x_used.data(), w.widened.data(), c.bias ? b.data() : nullptr, ref.data(),
                           c.m, c.k, c.n);
      EXPECT_TRUE(Close(out.data(), ref.data(), out.n, 1e-4, 1e-4));
      EXPECT_TRUE(out.GuardsIntact());
    }
  }
}

// Bf16Gemm against its plain reference: m across and off the 32-row panels, n across and off
// the 12-row micro-kernel and 96-row task blocks, odd k (the last pair half zero, nothing read
// past a row), k below and above one 32-element conversion block. F32 accumulation of exact
// BF16 products: agreement to F32 rounding of the sum.
TEST(KernelsCpu, Bf16GemmMatchesReference) {
  if (!cpu::HasBf16DotProduct()) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  struct Case {
    int m, k, n;
  };
  const Case cases[] = {{1, 2, 1},     {31, 7, 13}, {33, 64, 12},   {64, 33, 97},
                        {129, 96, 70}, {200, 1, 5}, {577, 130, 203}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "m=" << c.m << " k=" << c.k << " n=" << c.n);
    auto x = Random(static_cast<size_t>(c.m) * c.k, 41);
    StoredWeight w =
        Store(Random(static_cast<size_t>(c.n) * c.k, 42, 0.3f), DType::kBF16, c.n, c.k);
    Guarded out(static_cast<size_t>(c.m) * c.n);
    std::vector<float> ref(out.n);
    cpu::Bf16Gemm(x.data(), c.m, c.k, w.bits.data(), c.n, out.data());
    cpu::Bf16GemmReference(x.data(), c.m, c.k, w.bits.data(), c.n, ref.data());
    EXPECT_TRUE(Close(out.data(), ref.data(), out.n, 1e-5, 1e-5));
    EXPECT_TRUE(out.GuardsIntact());
  }
}

// Each Bf16Gemm output row is what that row gives alone (one summation order over k whatever
// the panel it shares), so a prefill's rows do not depend on how many rows came with them.
TEST(KernelsCpu, Bf16GemmRowsDoNotDependOnTheirNeighbours) {
  if (!cpu::HasBf16DotProduct()) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  const int m = 150, k = 100, n = 110;
  auto x = Random(static_cast<size_t>(m) * k, 51);
  StoredWeight w = Store(Random(static_cast<size_t>(n) * k, 52, 0.3f), DType::kBF16, n, k);
  std::vector<float> together(static_cast<size_t>(m) * n), alone(n);
  cpu::Bf16Gemm(x.data(), m, k, w.bits.data(), n, together.data());
  for (int i : {0, 31, 32, 149}) {
    cpu::Bf16Gemm(x.data() + static_cast<size_t>(i) * k, 1, k, w.bits.data(), n, alone.data());
    EXPECT_EQ(
        std::memcmp(alone.data(), together.data() + static_cast<size_t>(i) * n, sizeof(float) * n),
        0)
        << "row " << i;
  }
}

// Up to kGemvRowsF32 rows (F32) and kGemvRowsNarrow rows (BF16/F16), each output row is exactly
// what that row alone gives: a sequence
// decoded in a batch sees the logits of its solo run.
TEST(KernelsCpu, LinearIsBatchInvariantUpToTheGemvRows) {
  const int k = 96, n = 70;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    StoredWeight w = Store(Random(static_cast<size_t>(n) * k, 21, 0.3f), dtype, n, k);
    const int most = dtype == DType::kF32 ? cpu::kGemvRowsF32 : cpu::kGemvRowsNarrow;
    for (int m : {2, 5, cpu::kGemvRowsF32, most}) {
      auto x = Random(static_cast<size_t>(m) * k, 22 + m);
      std::vector<float> together(static_cast<size_t>(m) * n), alone(n);
      ASSERT_TRUE(cpu::Linear(x.data(), w.view, nullptr, together.data(), m).ok());
      for (int i = 0; i < m; ++i) {
        ASSERT_TRUE(
            cpu::Linear(x.data() + static_cast<size_t>(i) * k, w.view, nullptr, alone.data(), 1)
                .ok());
        EXPECT_EQ(std::memcmp(alone.data(), together.data() + static_cast<size_t>(i) * n,
                              sizeof(float) * n),
                  0)
            << "row " << i << " of " << m;
      }
    }
  }
}

TEST(KernelsCpu, LinearRejectsWeightViewsItCannotTake) {
  float x[4] = {}, y[4] = {};
  std::vector<float> w(8, 0.f);
  TensorView v{w.data(), DType::kF32, Device::kCpu, {2, 4}};
  EXPECT_TRUE(cpu::Linear(x, v, nullptr, y, 1).ok());
  TensorView on_gpu = v;
  on_gpu.device = Device::kCuda;
  EXPECT_EQ(cpu::Linear(x, on_gpu, nullptr, y, 1).code(), absl::StatusCode::kInvalidArgument);
  TensorView flat = v;
  flat.shape = {8};
  EXPECT_EQ(cpu::Linear(x, flat, nullptr, y, 1).code(), absl::StatusCode::kInvalidArgument);
}

// One query over a cache split into spans (blocks): F32 and BF16 caches against the double
// reference on the same (widened) values; the result does not depend on the split.
TEST(KernelsCpu, DecodeAttentionMatchesReferenceAndIgnoresTheSplit) {
  struct Case {
    int rows, heads, kv_heads, head_dim;
  };
  const Case cases[] = {
      {1, 1, 1, 8}, {17, 4, 2, 16}, {100, 8, 2, 64}, {33, 3, 3, 10}, {600, 4, 1, 128}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " rows=" << c.rows << " heads="
                                        << c.heads << "/" << c.kv_heads << " hd=" << c.head_dim);
      const size_t kv_n = static_cast<size_t>(c.rows) * c.kv_heads * c.head_dim;
      auto q = Random(static_cast<size_t>(c.heads) * c.head_dim, 31);
      auto k = Random(kv_n, 32), v = Random(kv_n, 33);
      std::vector<uint16_t> k16(kv_n), v16(kv_n);
      ConvertFromF32(DType::kBF16, k.data(), k16.data(), kv_n);
      ConvertFromF32(DType::kBF16, v.data(), v16.data(), kv_n);
      const size_t elem = DTypeSize(dtype);
      const auto* kb = dtype == DType::kF32 ? reinterpret_cast<const uint8_t*>(k.data())
                                            : reinterpret_cast<const uint8_t*>(k16.data());
      const auto* vb = dtype == DType::kF32 ? reinterpret_cast<const uint8_t*>(v.data())
                                            : reinterpret_cast<const uint8_t*>(v16.data());
      const int64_t row_bytes = static_cast<int64_t>(c.kv_heads) * c.head_dim * elem;
      auto run = [&](int span_rows, float* out, std::vector<cpu::KvSpan>& spans) {
        for (int r = 0; r < c.rows; r += span_rows) {
          spans.push_back(
              {kb + r * row_bytes, vb + r * row_bytes, std::min(span_rows, c.rows - r)});
        }
        cpu::DecodeAttentionArgs a = testing_support::DecodeOverSpans(
            q.data(), spans, /*span_begin=*/nullptr, /*n_seqs=*/1, dtype, c.heads, c.kv_heads,
            c.head_dim, 1.f / std::sqrt(static_cast<float>(c.head_dim)));
        a.out = out;
        return a;
      };
      Guarded whole(static_cast<size_t>(c.heads) * c.head_dim);
      std::vector<float> ref(whole.n), blocks(whole.n);
      std::vector<cpu::KvSpan> one, same, seven;
      cpu::DecodeAttentionArgs a = run(c.rows, whole.data(), one);
      ASSERT_TRUE(cpu::DecodeAttention(a).ok());
      EXPECT_TRUE(whole.GuardsIntact());
      cpu::DecodeAttentionArgs r = run(c.rows, ref.data(), same);
      cpu::DecodeAttentionReference(r);
      EXPECT_TRUE(Close(whole.data(), ref.data(), whole.n, 1e-5, 1e-4));
      cpu::DecodeAttentionArgs b = run(7, blocks.data(), seven);
      ASSERT_TRUE(cpu::DecodeAttention(b).ok());
      EXPECT_EQ(std::memcmp(blocks.data(), whole.data(), sizeof(float) * whole.n), 0);
    }
  }
}

// A batch of sequences of different lengths in one call (one query row each, their own spans,
// split differently): each sequence's output equals its solo call bit for bit and the double
// reference within tolerance; a bad span_begin table is refused.
TEST(KernelsCpu, DecodeAttentionBatchEqualsEachSequenceAlone) {
  const int heads = 8, kv_heads = 2, hd = 64;
  const int q_dim = heads * hd;
  const int64_t row_floats = int64_t{kv_heads} * hd;
  const std::vector<int> lengths = {1, 130, 7, 600, 33};
  const std::vector<int> block_rows = {16, 7, 1, 128, 33};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const int n_seqs = static_cast<int>(lengths.size());
    auto q = Random(static_cast<size_t>(n_seqs) * q_dim, 41);
    std::vector<std::vector<uint8_t>> k(n_seqs), v(n_seqs);
    std::vector<cpu::KvSpan> spans;
    std::vector<int> span_begin = {0};
    for (int i = 0; i < n_seqs; ++i) {
      const size_t n = static_cast<size_t>(lengths[i]) * row_floats;
      const auto kf = Random(n, 50 + i), vf = Random(n, 60 + i);
      k[i].resize(n * DTypeSize(dtype));
      v[i].resize(n * DTypeSize(dtype));
      ConvertFromF32(dtype, kf.data(), k[i].data(), n);
      ConvertFromF32(dtype, vf.data(), v[i].data(), n);
      const int64_t row_bytes = row_floats * DTypeSize(dtype);
      for (int r = 0; r < lengths[i]; r += block_rows[i]) {
        spans.push_back({k[i].data() + r * row_bytes, v[i].data() + r * row_bytes,
                         std::min(block_rows[i], lengths[i] - r)});
      }
      span_begin.push_back(static_cast<int>(spans.size()));
    }
    cpu::DecodeAttentionArgs a =
        testing_support::DecodeOverSpans(q.data(), spans, span_begin.data(), n_seqs, dtype, heads,
                                         kv_heads, hd, 1.f / std::sqrt(static_cast<float>(hd)));
    Guarded batched(static_cast<size_t>(n_seqs) * q_dim);
    a.out = batched.data();
    ASSERT_TRUE(cpu::DecodeAttention(a).ok());
    EXPECT_TRUE(batched.GuardsIntact());
    std::vector<float> ref(batched.n);
    cpu::DecodeAttentionArgs r = a;
    r.out = ref.data();
    cpu::DecodeAttentionReference(r);
    EXPECT_TRUE(Close(batched.data(), ref.data(), batched.n, 1e-5, 1e-4));
    for (int i = 0; i < n_seqs; ++i) {
      std::vector<float> solo(q_dim);
      cpu::DecodeAttentionArgs one = a;
      one.q = q.data() + i * q_dim;
      one.out = solo.data();
      one.spans = spans.data() + span_begin[i];
      one.n_spans = span_begin[i + 1] - span_begin[i];
      one.n_seqs = 1;
      one.span_begin = nullptr;
      ASSERT_TRUE(cpu::DecodeAttention(one).ok());
      EXPECT_EQ(std::memcmp(solo.data(), batched.data() + i * q_dim, sizeof(float) * q_dim), 0)
          << "sequence " << i;
    }
    // Bad tables: not starting at 0, not ending at n_spans, decreasing, a sequence with no row,
    // several sequences without a table.
    std::vector<int> bad = span_begin;
    bad[0] = 1;
    a.span_begin = bad.data();
    EXPECT_EQ(cpu::DecodeAttention(a).code(), absl::StatusCode::kInvalidArgument);
    bad = span_begin;
    bad[n_seqs] -= 1;
    EXPECT_EQ(cpu::DecodeAttention(a).code(), absl::StatusCode::kInvalidArgument);
    bad = span_begin;
    std::swap(bad[1], bad[2]);
    EXPECT_EQ(cpu::DecodeAttention(a).code(), absl::StatusCode::kInvalidArgument);
    bad = span_begin;
    bad[2] = bad[1];  // sequence 1 has no row
    const absl::Status empty = cpu::DecodeAttention(a);
    EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(empty.message().find("sequence 1 of 5"), absl::string_view::npos) << empty;
    a.span_begin = nullptr;
    EXPECT_EQ(cpu::DecodeAttention(a).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(KernelsCpu, LinearRejectsBadShapes) {
  float x = 0, w = 0, y = 0;
  EXPECT_EQ(cpu::Linear(&x, &w, nullptr, &y, 1, 0, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::Linear(nullptr, &w, nullptr, &y, 1, 1, 1).code(),
            absl::StatusCode::kInvalidArgument);
}

struct AttentionCase {
  int n_q, n_kv, heads, kv_heads, head_dim;
  bool causal;
};

TEST(KernelsCpu, AttentionMatchesReference) {
  const AttentionCase cases[] = {{1, 1, 1, 1, 8, true},       {5, 5, 4, 4, 8, true},
                                 {7, 7, 4, 2, 16, false},     {1, 33, 8, 2, 64, true},
                                 {13, 40, 4, 1, 32, true},    {300, 300, 2, 2, 24, true},
                                 {257, 257, 3, 3, 10, false}, {33, 600, 4, 4, 64, true}};
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "Attention n_q=" << c.n_q << " n_kv=" << c.n_kv << " heads=" << c.heads << "/"
                 << c.kv_heads << " hd=" << c.head_dim << " causal=" << c.causal);
    auto q = Random(static_cast<size_t>(c.n_q) * c.heads * c.head_dim, 4);
    auto k = Random(static_cast<size_t>(c.n_kv) * c.kv_heads * c.head_dim, 5);
    auto v = Random(static_cast<size_t>(c.n_kv) * c.kv_heads * c.head_dim, 6);
    Guarded out(static_cast<size_t>(c.n_q) * c.heads * c.head_dim);
    Guarded lse(static_cast<size_t>(c.heads) * c.n_q);
    std::vector<float> ref(out.n), ref_lse(lse.n);
    cpu::AttentionArgs a{.q = q.data(),
                         .k = k.data(),
                         .v = v.data(),
                         .out = out.data(),
                         .lse = lse.data(),
                         .n_q = c.n_q,
                         .n_kv = c.n_kv,
                         .n_heads = c.heads,
                         .n_kv_heads = c.kv_heads,
                         .head_dim = c.head_dim,
                         .scale = 1.f / std::sqrt(static_cast<float>(c.head_dim)),
                         .causal = c.causal,
                         .causal_offset = c.n_kv - c.n_q};
    ASSERT_TRUE(cpu::Attention(a).ok());
    cpu::AttentionArgs r = a;
    r.out = ref.data();
    r.lse = ref_lse.data();
    cpu::AttentionReference(r);
    EXPECT_TRUE(Close(out.data(), ref.data(), out.n, 1e-5, 1e-4));
    EXPECT_TRUE(Close(lse.data(), ref_lse.data(), lse.n, 1e-5, 1e-5));
    EXPECT_TRUE(out.GuardsIntact());
    EXPECT_TRUE(lse.GuardsIntact());
  }
}

TEST(KernelsCpu, AttentionCausalRowIgnoresLaterKeys) {
  // Row 0 of a causal attention sees only key 0, so its output is exactly v_0.
  const int hd = 4;
  auto q = Random(3 * hd, 7), k = Random(3 * hd, 8), v = Random(3 * hd, 9);
  std::vector<float> out(3 * hd);
  const cpu::AttentionArgs a = testing_support::SelfAttention(
      q.data(), k.data(), v.data(), out.data(), /*lse=*/nullptr, /*n=*/3, /*heads=*/1,
      /*kv_heads=*/1, hd, /*scale=*/0.5f, /*causal=*/true);
  ASSERT_TRUE(cpu::Attention(a).ok());
  for (int t = 0; t < hd; ++t) EXPECT_FLOAT_EQ(out[t], v[t]);
}

// Attention of n rows over the same n keys (q [n, heads·hd], k and v [n, kv_heads·hd]) into out
// and lse, at scale 1/√hd, with `operands`.
cpu::AttentionArgs SquareAttention(const std::vector<float>& q, const std::vector<float>& k,
                                   const std::vector<float>& v, float* out, float* lse, int n,
                                   int heads, int kv_heads, int hd, bool causal, DType operands) {
  cpu::AttentionArgs a =
      testing_support::SelfAttention(q.data(), k.data(), v.data(), out, lse, n, heads, kv_heads, hd,
                                     1.f / std::sqrt(static_cast<float>(hd)), causal);
  a.operands = operands;
  return a;
}

// BF16/F16 operands: equal to the reference that rounds the same operands (F64 sums), and equal
// to F32 attention over inputs that were already narrow, up to the probabilities' rounding; far
// from F32 attention over the unrounded inputs, so the rounding happens.
TEST(KernelsCpu, AttentionWithNarrowOperands) {
  const int n = 45, heads = 4, kv_heads = 2, hd = 32;
  auto q = Random(static_cast<size_t>(n) * heads * hd, 21, 2.f);
  auto k = Random(static_cast<size_t>(n) * kv_heads * hd, 22, 2.f);
  auto v = Random(static_cast<size_t>(n) * kv_heads * hd, 23);
  for (DType type : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(type));
    std::vector<float> out(q.size()), ref(q.size()), f32(q.size()), lse(heads * n),
        ref_lse(heads * n);
    cpu::AttentionArgs a = SquareAttention(q, k, v, out.data(), lse.data(), n, heads, kv_heads, hd,
                                           /*causal=*/true, type);
    ASSERT_TRUE(cpu::Attention(a).ok());
    cpu::AttentionArgs r = a;
    r.out = ref.data();
    r.lse = ref_lse.data();
    cpu::AttentionReference(r);
    EXPECT_TRUE(Close(out.data(), ref.data(), out.size(), 4e-3, 1e-2));
    EXPECT_TRUE(Close(lse.data(), ref_lse.data(), lse.size(), 1e-5, 1e-5));
    // Every probability is a narrow value: out is a sum of products of narrow numbers.
    cpu::AttentionArgs wide = a;
    wide.operands = DType::kF32;
    wide.out = f32.data();
    wide.lse = nullptr;
    ASSERT_TRUE(cpu::Attention(wide).ok());
    double worst = 0;
    for (size_t i = 0; i < out.size(); ++i)
      worst = std::max(worst, double{std::fabs(out[i] - f32[i])});
    EXPECT_GT(worst, 1e-4) << "narrow operands give the F32 result: nothing was rounded";
    EXPECT_LT(worst, 0.1);
  }
}

// Variable-length attention: each segment's rows get, bit for bit, what that segment gives as an
// attention of its own (out and each row's log-sum-exp), and the reference agrees. A segment
// longer than a row block, an empty one and one of a single row; causal and not; narrow operands.
TEST(KernelsCpu, SegmentedAttentionEqualsEachSegmentAlone) {
  const std::vector<int32_t> bounds = {0, 300, 300, 301, 345};
  const int n = bounds.back(), heads = 4, kv_heads = 2, hd = 16;
  auto q = Random(static_cast<size_t>(n) * heads * hd, 31, 2.f);
  auto k = Random(static_cast<size_t>(n) * kv_heads * hd, 32, 2.f);
  auto v = Random(static_cast<size_t>(n) * kv_heads * hd, 33);
  for (const bool causal : {false, true}) {
    for (const DType type : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(::testing::Message() << "causal=" << causal << " " << DTypeName(type));
      std::vector<float> out(q.size()), lse(heads * n), ref(q.size()), ref_lse(heads * n);
      cpu::AttentionArgs a =
          SquareAttention(q, k, v, out.data(), lse.data(), n, heads, kv_heads, hd, causal, type);
      a.segment_bounds = bounds.data();
      a.n_segments = static_cast<int>(bounds.size()) - 1;
      ASSERT_TRUE(cpu::Attention(a).ok());
      cpu::AttentionArgs r = a;
      r.out = ref.data();
      r.lse = ref_lse.data();
      cpu::AttentionReference(r);
      const double atol = type == DType::kF32 ? 1e-5 : 4e-3,
                   rtol = type == DType::kF32 ? 1e-4 : 1e-2;
      EXPECT_TRUE(Close(out.data(), ref.data(), out.size(), atol, rtol));
      EXPECT_TRUE(Close(lse.data(), ref_lse.data(), lse.size(), 1e-5, 1e-5));
      for (size_t s = 0; s + 1 < bounds.size(); ++s) {
        const int first = bounds[s], len = bounds[s + 1] - bounds[s];
        if (len == 0) continue;
        std::vector<float> one(static_cast<size_t>(len) * heads * hd), one_lse(heads * len);
        cpu::AttentionArgs alone = a;
        alone.q = q.data() + int64_t{first} * heads * hd;
        alone.k = k.data() + int64_t{first} * kv_heads * hd;
        alone.v = v.data() + int64_t{first} * kv_heads * hd;
        alone.out = one.data();
        alone.lse = one_lse.data();
        alone.n_q = alone.n_kv = len;
        alone.segment_bounds = nullptr;
        alone.n_segments = 0;
        ASSERT_TRUE(cpu::Attention(alone).ok());
        EXPECT_EQ(0, std::memcmp(one.data(), out.data() + int64_t{first} * heads * hd,
                                 one.size() * sizeof(float)))
            << "segment " << s;
        for (int h = 0; h < heads; ++h) {
          EXPECT_EQ(0, std::memcmp(one_lse.data() + h * len, lse.data() + h * n + first,
                                   len * sizeof(float)))
              << "segment " << s << " head " << h;
        }
      }
    }
  }
}

TEST(KernelsCpu, SegmentedAttentionRejectsBadBounds) {
  float x[8] = {};
  cpu::AttentionArgs a = testing_support::SelfAttention(x, x, x, x + 4, /*lse=*/nullptr, /*n=*/4,
                                                        /*heads=*/1, /*kv_heads=*/1, /*hd=*/1,
                                                        /*scale=*/1.f, /*causal=*/false);
  const int32_t falling[] = {0, 3, 2, 4}, short_end[] = {0, 2, 3}, late_start[] = {1, 4};
  a.n_segments = 3;
  a.segment_bounds = falling;
  EXPECT_EQ(cpu::Attention(a).code(), absl::StatusCode::kInvalidArgument);
  a.n_segments = 2;
  a.segment_bounds = short_end;
  EXPECT_EQ(cpu::Attention(a).code(), absl::StatusCode::kInvalidArgument);
  a.n_segments = 1;
  a.segment_bounds = late_start;
  EXPECT_EQ(cpu::Attention(a).code(), absl::StatusCode::kInvalidArgument);
  a.segment_bounds = nullptr;
  EXPECT_EQ(cpu::Attention(a).code(), absl::StatusCode::kInvalidArgument);
  const int32_t whole[] = {0, 4};
  a.segment_bounds = whole;
  a.n_kv = 5;  // segments need n_kv == n_q
  EXPECT_EQ(cpu::Attention(a).code(), absl::StatusCode::kInvalidArgument);
  a.n_kv = 4;
  EXPECT_TRUE(cpu::Attention(a).ok());
}

TEST(KernelsCpu, AttentionRejectsBadGrouping) {
  float x = 0;
  const cpu::AttentionArgs a = testing_support::SelfAttention(
      &x, &x, &x, &x, /*lse=*/nullptr, /*n=*/1, /*heads=*/3, /*kv_heads=*/2, /*hd=*/1,
      /*scale=*/0.f, /*causal=*/false);
  EXPECT_EQ(cpu::Attention(a).code(), absl::StatusCode::kInvalidArgument);
}

TEST(KernelsCpu, NormsMatchReference) {
  for (int d : {1, 7, 64, 129}) {
    SCOPED_TRACE(::testing::Message() << "d=" << d);
    const int rows = 5;
    auto x = Random(rows * d, 10, 3.f);
    auto w = Random(d, 11);
    auto b = Random(d, 12);
    Guarded out(rows * d);
    std::vector<float> ref(rows * d);
    ASSERT_TRUE(cpu::RmsNorm(x.data(), w.data(), out.data(), rows, d, 1e-6f).ok());
    for (int r = 0; r < rows; ++r) {
      double ss = 0;
      for (int i = 0; i < d; ++i) ss += x[r * d + i] * x[r * d + i];
      for (int i = 0; i < d; ++i) ref[r * d + i] = x[r * d + i] / std::sqrt(ss / d + 1e-6) * w[i];
    }
    EXPECT_TRUE(Close(out.data(), ref.data(), ref.size(), 1e-5, 1e-5));
    EXPECT_TRUE(out.GuardsIntact());
    ASSERT_TRUE(cpu::LayerNorm(x.data(), w.data(), b.data(), out.data(), rows, d, 1e-5f).ok());
    for (int r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int i = 0; i < d; ++i) mean += x[r * d + i];
      mean /= d;
      for (int i = 0; i < d; ++i) var += (x[r * d + i] - mean) * (x[r * d + i] - mean);
      var /= d;
      for (int i = 0; i < d; ++i) {
        ref[r * d + i] = (x[r * d + i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i];
      }
    }
    EXPECT_TRUE(Close(out.data(), ref.data(), ref.size(), 1e-5, 1e-5));
    EXPECT_TRUE(out.GuardsIntact());
  }
}

TEST(KernelsCpu, RopeMatchesRotateHalfFormula) {
  const int rows = 6, heads = 3, hd = 10;
  auto x = Random(rows * heads * hd, 13);
  std::vector<int32_t> pos = {0, 1, 5, 17, 100, 4095};
  Guarded out(x.size());
  std::copy(x.begin(), x.end(), out.data());
  ASSERT_TRUE(cpu::Rope(out.data(), pos.data(), rows, heads, hd, 10000.f).ok());
  std::vector<float> ref(x.size());
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const float* v = x.data() + (r * heads + h) * hd;
      for (int i = 0; i < hd; ++i) {
        const int j = i % (hd / 2);
        const double angle = pos[r] * std::pow(10000.0, -2.0 * j / hd);
        const double rot = i < hd / 2 ? -v[i + hd / 2] : v[i - hd / 2];
        ref[(r * heads + h) * hd + i] =
            static_cast<float>(v[i] * std::cos(angle) + rot * std::sin(angle));
      }
    }
  }
  EXPECT_TRUE(Close(out.data(), ref.data(), ref.size(), 1e-5, 1e-5));
  EXPECT_TRUE(out.GuardsIntact());
  // Position 0 is the identity.
  for (int i = 0; i < heads * hd; ++i) EXPECT_FLOAT_EQ(out.data()[i], x[i]);
  EXPECT_EQ(cpu::Rope(out.data(), pos.data(), rows, heads, 7, 10000.f).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KernelsCpu, ActivationsMatchFormulas) {
  const int n = 100000;  // above the threading threshold
  auto x = Random(n, 14, 3.f);
  std::vector<float> y = x, ref(n);
  cpu::QuickGelu(y.data(), n);
  for (int i = 0; i < n; ++i) ref[i] = static_cast<float>(x[i] / (1.0 + std::exp(-1.702 * x[i])));
  EXPECT_TRUE(Close(y.data(), ref.data(), n, 1e-6, 1e-5));
  y = x;
  cpu::Gelu(y.data(), n);
  for (int i = 0; i < n; ++i)
    ref[i] = static_cast<float>(0.5 * x[i] * (1 + std::erf(x[i] / std::sqrt(2.0))));
  EXPECT_TRUE(Close(y.data(), ref.data(), n, 1e-6, 1e-5));
  auto up = Random(n, 15);
  y = x;
  cpu::SiluMul(y.data(), up.data(), n);
  for (int i = 0; i < n; ++i) ref[i] = static_cast<float>(x[i] / (1.0 + std::exp(-x[i])) * up[i]);
  EXPECT_TRUE(Close(y.data(), ref.data(), n, 1e-6, 1e-5));
}

}  // namespace
}  // namespace hap
