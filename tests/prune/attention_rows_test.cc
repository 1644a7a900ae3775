// Table-driven parity harness for TextVisualAttention: every case builds a random sequence
// [prefix][visual][text], computes the full causal softmax directly, and compares the kernel's
// text→visual rows (renormalised and raw) element-wise with atol + rtol·|ref|. Fails on NaN/Inf
// and on writes into guard zones around the output.
#include "kernels/cpu/prune/attention_rows.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/kernels/attention_args.h"
#include "tests/prune/parity_outcome.h"
#include "tests/prune/reference.h"

namespace hap {
namespace {

struct Case {
  int n_text, n_vis, n_heads, n_kv_heads, head_dim;
  bool renormalize;
  std::string backend;  // "cpu"; a CUDA twin adds "cuda" rows
  double atol, rtol;    // F32 tolerances
};

std::string Name(const Case& c) {
  return absl::StrFormat("%s t%d v%d h%d/%d d%d %s", c.backend, c.n_text, c.n_vis, c.n_heads,
                         c.n_kv_heads, c.head_dim, c.renormalize ? "renorm" : "raw");
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (int nt : {1, 3, 17})
    for (int nv : {1, 7, 33, 576})
      for (auto [h, kvh] : {std::pair{4, 4}, std::pair{8, 2}})
        for (int hd : {8, 64})
          for (bool renorm : {true, false})
            cases.push_back({nt, nv, h, kvh, hd, renorm, "cpu", 1e-6, 1e-4});
  return cases;
}

constexpr int kPrefix = 5;  // text before the image (BOS + "USER:" …)
constexpr int kGuard = 64;
const float kSentinel = 1234.5f;

testref::ParityOutcome RunCase(const Case& c, uint64_t seed) {
  const int n = kPrefix + c.n_vis + c.n_text;
  const int H = c.n_heads, KVH = c.n_kv_heads, hd = c.head_dim;
  // Larger-than-unit Q so rows are peaky, which exercises the exp range.
  const std::vector<float> q = testref::RandomNormal(size_t(n) * H * hd, seed, 1.5f);
  const std::vector<float> k = testref::RandomNormal(size_t(n) * KVH * hd, seed + 1, 1.5f);
  const double scale = 1.0 / std::sqrt(double(hd));

  // Direct computation: full causal maps and per-row LSE in the engine's layout [H, n].
  std::vector<float> lse(size_t(H) * n);
  std::vector<std::vector<std::vector<double>>> p(H);
  for (int h = 0; h < H; ++h) {
    std::vector<double> l;
    testref::CausalAttention(q, k, n, H, KVH, hd, h, scale, &p[h], &l);
    for (int r = 0; r < n; ++r) lse[size_t(h) * n + r] = static_cast<float>(l[r]);
  }

  const size_t out_n = size_t(H) * c.n_text * c.n_vis;
  std::vector<float> buf(out_n + 2 * kGuard, kSentinel);
  const int text_begin = kPrefix + c.n_vis;
  kernels::TextVisualAttentionArgs a = testing_support::TextVisualRows(
      q.data() + size_t(text_begin) * H * hd, k.data() + size_t(kPrefix) * KVH * hd,
      lse.data() + text_begin, c.n_text, c.n_vis, H, KVH, hd, static_cast<float>(scale),
      buf.data() + kGuard);
  a.lse_stride = n;
  a.renormalize = c.renormalize;
  const absl::Status st = kernels::TextVisualAttention(a);
  EXPECT_TRUE(st.ok()) << st;

  testref::ParityOutcome o;
  for (int g = 0; g < kGuard; ++g) {
    o.guards_intact &= buf[g] == kSentinel && buf[kGuard + out_n + g] == kSentinel;
  }
  for (int h = 0; h < H; ++h) {
    for (int j = 0; j < c.n_text; ++j) {
      const auto& row = p[h][text_begin + j];
      double vis_sum = 0;
      for (int i = 0; i < c.n_vis; ++i) vis_sum += row[kPrefix + i];
      for (int i = 0; i < c.n_vis; ++i) {
        const double ref = c.renormalize ? row[kPrefix + i] / vis_sum : row[kPrefix + i];
        o.Add(a.out[(size_t(h) * c.n_text + j) * c.n_vis + i], ref, c.atol, c.rtol);
      }
    }
  }
  return o;
}

TEST(AttentionRowsParity, AllCases) {
  testref::ParityTally tally;
  int skipped = 0;
  uint64_t seed = 100;
  for (const Case& c : Cases()) {
    if (c.backend != "cpu") {  // no GPU twin is built in this configuration
      ++skipped;
      continue;
    }
    tally.Check(Name(c), RunCase(c, seed += 2));
  }
  std::printf(
      "attention rows: %d cpu cases passed, %d gpu cases skipped; worst err/tol %.3f in %s\n",
      tally.passed, skipped, tally.worst_ratio, tally.worst_case.c_str());
  EXPECT_EQ(tally.passed, static_cast<int>(Cases().size()));
}

TEST(AttentionRows, RenormalisedRowsSumToOne) {
  const Case c{5, 33, 8, 2, 8, true, "cpu", 1e-6, 1e-4};
  const int n = kPrefix + c.n_vis + c.n_text;
  const auto q = testref::RandomNormal(size_t(n) * 8 * 8, 3);
  const auto k = testref::RandomNormal(size_t(n) * 2 * 8, 4);
  std::vector<float> out(8 * 5 * 33);
  const kernels::TextVisualAttentionArgs a = testing_support::TextVisualRows(
      q.data() + (kPrefix + 33) * 64, k.data() + kPrefix * 16, /*lse=*/nullptr, /*n_text=*/5,
      /*n_vis=*/33, /*heads=*/8, /*kv_heads=*/2, /*hd=*/8, 0.35f, out.data());
  ASSERT_TRUE(kernels::TextVisualAttention(a).ok());  // lse not needed when renormalising
  for (int r = 0; r < 8 * 5; ++r) {
    double s = 0;
    for (int i = 0; i < 33; ++i) s += out[r * 33 + i];
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
}

TEST(AttentionRows, StaysFiniteWhenVisualMassUnderflows) {
  // One text row whose visual logits sit ~150 below its log-sum-exp: α = e^−150 underflows to 0
  // in F32, yet the renormalised row must still be the softmax over the visual tokens.
  const int hd = 4;
  std::vector<float> q = {10, 0, 0, 0};
  std::vector<float> k = {-5, 0, 0, 0, -5.1f, 0, 0, 0};  // two visual keys
  const float lse = 100.f;                               // dominated by some non-visual key
  std::vector<float> out(2);
  kernels::TextVisualAttentionArgs a = testing_support::TextVisualRows(
      q.data(), k.data(), &lse, /*n_text=*/1, /*n_vis=*/2, /*heads=*/1, /*kv_heads=*/1, hd,
      /*scale=*/1.f, out.data());
  ASSERT_TRUE(kernels::TextVisualAttention(a).ok());
  const double e = std::exp(1.0);  // logits −50 and −51
  EXPECT_NEAR(out[0], e / (e + 1), 1e-6);
  EXPECT_NEAR(out[1], 1 / (e + 1), 1e-6);
  a.renormalize = false;
  ASSERT_TRUE(kernels::TextVisualAttention(a).ok());
  EXPECT_EQ(out[0], 0.f);
  EXPECT_EQ(out[1], 0.f);
}

TEST(AttentionRows, RejectsBadArguments) {
  std::vector<float> buf(64);
  kernels::TextVisualAttentionArgs a = testing_support::TextVisualRows(
      buf.data(), buf.data(), /*lse=*/nullptr, /*n_text=*/1, /*n_vis=*/1, /*heads=*/6,
      /*kv_heads=*/4, /*hd=*/2, /*scale=*/1.f, buf.data());  // 6 % 4 ≠ 0
  EXPECT_EQ(kernels::TextVisualAttention(a).code(), absl::StatusCode::kInvalidArgument);
  a.n_kv_heads = 3;
  a.renormalize = false;  // raw weights need the LSE
  EXPECT_EQ(kernels::TextVisualAttention(a).code(), absl::StatusCode::kInvalidArgument);
  a.renormalize = true;
  a.n_vis = 0;
  EXPECT_EQ(kernels::TextVisualAttention(a).code(), absl::StatusCode::kInvalidArgument);
  a.n_vis = 1;
  a.q_stride = 3;  // < n_heads·head_dim
  EXPECT_EQ(kernels::TextVisualAttention(a).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hap
