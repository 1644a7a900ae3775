// VisionZip: a hand-built case with the expected tokens written out, and random cases against a
// direct recomputation.
#include "runtime/prune/visionzip.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "tests/prune/reference.h"

namespace hap {
namespace {

TEST(VisionZip, HandBuiltCase) {
  // CLS + 6 patches, one head, head_dim 2, scale 1, CLS query (1, 0): the logits are the keys'
  // first components: patch 3 (5) and patch 1 (3) dominate.
  const std::vector<float> k = {0, 1, 3, 0.1f, -1, 1, 5, 0, -1, -1, 0.5f, 2, -2, 1};
  std::vector<float> q(7 * 2, 0.f);
  q[0] = 1.f;
  std::vector<float> hidden(7 * 2);
  for (int i = 0; i < 7; ++i) {
    hidden[i * 2] = float(i);
    hidden[i * 2 + 1] = 10.f * i;
  }
  VisionZipInput in{q.data(), k.data(), hidden.data(), 7, 1, 2, 2, 1.f};
  VisionZipExplain x;
  auto out = VisionZipCompress(in, {3, 2}, &x);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(x.dominant, std::vector<int>({0, 1, 3}));
  // Remaining [2, 4, 5, 6], stride 4/2 = 2 → targets 2 and 5. Token 4 (−1,−1) has cosine 0
  // with 2 (−1,1) and < 0 with 5; token 6 (−2,1) is closer to 2 (0.95) than to 5 (0.22).
  EXPECT_EQ(x.targets, std::vector<int>({2, 5}));
  EXPECT_EQ(x.merged_count, std::vector<int>({2, 0}));
  const std::vector<float> want = {0, 0,  1, 10, 3, 30,  // dominant rows
                                   7, 70,                // h2 + mean(h4, h6) = (2,20) + (5,50)
                                   5, 50};               // h5, nothing merged
  EXPECT_EQ(*out, want);
  // CLS attention of patch 3: e^5 / Σ e^logit.
  const double z = 1 + std::exp(3.0) + std::exp(-1.0) + std::exp(5.0) + std::exp(-1.0) +
                   std::exp(0.5) + std::exp(-2.0);
  EXPECT_NEAR(x.cls_attention[3], std::exp(5.0) / z, 1e-6);
}

// Direct recomputation of the VisionZip of docs/design.md §4.
std::vector<double> Direct(const std::vector<float>& q, const std::vector<float>& k,
                           const std::vector<float>& hid, int n, int H, int hd, int d, double scale,
                           int dom, int ctx) {
  std::vector<double> cls(n, 0.0);
  for (int h = 0; h < H; ++h) {
    // The CLS row of the (non-causal) attention map: row 0 against all n keys.
    std::vector<double> l(n);
    for (int i = 0; i < n; ++i) {
      double s = 0;
      for (int e = 0; e < hd; ++e) s += double(q[h * hd + e]) * k[(i * H + h) * hd + e];
      l[i] = scale * s;
    }
    const double mx = *std::max_element(l.begin(), l.end());
    double z = 0;
    for (double v : l) z += std::exp(v - mx);
    for (int i = 0; i < n; ++i) cls[i] += std::exp(l[i] - mx) / z;
  }
  std::vector<int> patches(n - 1);
  std::iota(patches.begin(), patches.end(), 1);
  std::stable_sort(patches.begin(), patches.end(), [&](int a, int b) { return cls[a] > cls[b]; });
  std::vector<int> dominant = {0};
  dominant.insert(dominant.end(), patches.begin(), patches.begin() + (dom - 1));
  std::sort(dominant.begin(), dominant.end());
  std::vector<int> rest;
  for (int t = 0; t < n; ++t)
    if (!std::count(dominant.begin(), dominant.end(), t)) rest.push_back(t);
  std::vector<double> out;
  for (int t : dominant)
    for (int e = 0; e < d; ++e) out.push_back(hid[t * d + e]);
  auto key = [&](int t) {
    std::vector<double> m(hd, 0.0);
    for (int h = 0; h < H; ++h)
      for (int e = 0; e < hd; ++e) m[e] += k[(t * H + h) * hd + e] / H;
    double nrm = 0;
    for (double v : m) nrm += v * v;
    for (double& v : m) v /= std::sqrt(nrm);
    return m;
  };
  if (ctx == 0) return out;
  const int step = std::max(1, int(rest.size()) / ctx);
  std::vector<int> targets;
  for (int c = 0; c < ctx; ++c) targets.push_back(rest[c * step]);
  std::vector<std::vector<double>> sum(ctx, std::vector<double>(d, 0.0));
  std::vector<int> cnt(ctx, 0);
  for (int t : rest) {
    if (std::count(targets.begin(), targets.end(), t)) continue;
    int best = 0;
    double bs = -1e300;
    for (int c = 0; c < ctx; ++c) {
      const auto a = key(t), b = key(targets[c]);
      double s = 0;
      for (int e = 0; e < hd; ++e) s += a[e] * b[e];
      if (s > bs) bs = s, best = c;
    }
    ++cnt[best];
    for (int e = 0; e < d; ++e) sum[best][e] += hid[t * d + e];
  }
  for (int c = 0; c < ctx; ++c)
    for (int e = 0; e < d; ++e)
      out.push_back(hid[targets[c] * d + e] + (cnt[c] ? sum[c][e] / cnt[c] : 0.0));
  return out;
}

TEST(VisionZip, RandomCasesMatchDirectRecomputation) {
  struct Case {
    int n, H, hd, d, dom, ctx;
  };
  for (const Case& c : {Case{41, 3, 8, 6, 9, 5}, Case{17, 2, 4, 3, 1, 4}, Case{30, 4, 8, 5, 12, 0},
                        Case{50, 2, 16, 7, 6, 44}}) {
    SCOPED_TRACE(testing::Message() << "n=" << c.n << " dom=" << c.dom << " ctx=" << c.ctx);
    const auto q = testref::RandomNormal(size_t(c.n) * c.H * c.hd, c.n * 3 + 1);
    const auto k = testref::RandomNormal(size_t(c.n) * c.H * c.hd, c.n * 3 + 2);
    const auto h = testref::RandomNormal(size_t(c.n) * c.d, c.n * 3 + 3);
    const double scale = 1 / std::sqrt(double(c.hd));
    VisionZipInput in{q.data(), k.data(), h.data(), c.n, c.H, c.hd, c.d, float(scale)};
    auto out = VisionZipCompress(in, {c.dom, c.ctx});
    ASSERT_TRUE(out.ok()) << out.status();
    const std::vector<double> want = Direct(q, k, h, c.n, c.H, c.hd, c.d, scale, c.dom, c.ctx);
    ASSERT_EQ(out->size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(std::isfinite((*out)[i]));
      worst = std::max(worst, std::abs((*out)[i] - want[i]) / (1e-5 + 1e-5 * std::abs(want[i])));
    }
    EXPECT_LE(worst, 1.0);
  }
}

TEST(VisionZip, SplitAndErrors) {
  auto c = VisionZipSplit(64, 576);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->dominant, 54);
  EXPECT_EQ(c->contextual, 10);
  c = VisionZipSplit(128, 576);
  EXPECT_EQ(c->dominant, 108);
  EXPECT_EQ(c->contextual, 20);
  c = VisionZipSplit(1, 576);
  EXPECT_EQ(c->dominant, 1);
  EXPECT_EQ(c->contextual, 0);
  c = VisionZipSplit(576, 576);
  EXPECT_FALSE(c->enabled());
  EXPECT_FALSE(VisionZipSplit(0.2, 576).ok());

  std::vector<float> buf(64, 0.1f);
  VisionZipInput in{buf.data(), buf.data(), buf.data(), 4, 1, 2, 2, 1.f};
  EXPECT_FALSE(VisionZipCompress(in, {0, 2}).ok());  // CLS is always dominant
  EXPECT_FALSE(VisionZipCompress(in, {3, 2}).ok());  // 5 > 4 tokens
  in.q = nullptr;
  EXPECT_FALSE(VisionZipCompress(in, {1, 1}).ok());
}

}  // namespace
}  // namespace hap
