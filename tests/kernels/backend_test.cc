// Every Backend runs every op against the plain references (kernels/cpu *Reference functions
// and the formulas written out here). The CPU backend is the one this build has; another
// backend joins by adding itself to Backends() and must pass the same cases.
#include "kernels/backend.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/decode_attention.h"
#include "kernels/cpu/linear.h"
#include "kernels/prune/paq.h"

namespace hap {
namespace {

std::vector<const Backend*> Backends() { return {&CpuBackend()}; }

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-3) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(double{a[i]} - b[i]) / std::max(floor, std::fabs(double{b[i]})));
  }
  return worst;
}

class BackendTest : public ::testing::TestWithParam<const Backend*> {
 protected:
  const Backend& b() const { return *GetParam(); }
};

TEST_P(BackendTest, LinearOnEveryWeightDtypeAndRowCount) {
  const int k = 70, n = 45;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<float> w = Random(size_t{n} * k, 1, 0.3f);
    std::vector<uint16_t> bits(w.size());
    if (dtype != DType::kF32) {
      ConvertFromF32(dtype, w.data(), bits.data(), w.size());
      ConvertToF32(dtype, bits.data(), w.data(), w.size());
    }
    TensorView view{dtype == DType::kF32 ? static_cast<const void*>(w.data()) : bits.data(), dtype,
                    Device::kCpu, {n, k}};
    auto bias = Random(n, 2);
    for (LinearRows rows : {LinearRows::kIndependent, LinearRows::kOneSequence})
    for (int m : {1, 5, 40, 200}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " m=" << m << " one sequence "
                                        << (rows == LinearRows::kOneSequence));
      auto x = Random(size_t(m) * k, 3 + m);
      std::vector<float> y(size_t(m) * n), ref(y.size());
      ASSERT_TRUE(b().Linear(x.data(), view, bias.data(), y.data(), m, rows).ok());
      // Products on BF16 weights round x to BF16 where the CPU has BF16 dot products: the
      // reference then takes the rounded x; either way the sum must match to F32 rounding.
      std::vector<float> x_ref = x;
      if (dtype == DType::kBF16 && cpu::HasBf16DotProduct()) {
        for (float& v : x_ref) v = BF16ToF32(F32ToBF16(v));
      }
      cpu::LinearReference(x_ref.data(), w.data(), bias.data(), ref.data(), m, k, n);
      EXPECT_LT(MaxRelDiff(y, ref, 0.1), 1e-4);
    }
  }
}

TEST_P(BackendTest, NormsActivationsAndAdd) {
  const int rows = 3, d = 37;
  auto x = Random(rows * d, 4), w = Random(d, 5), bias = Random(d, 6);
  std::vector<float> y(x.size()), ref(x.size());
  ASSERT_TRUE(b().RmsNorm(x.data(), w.data(), y.data(), rows, d, 1e-5f).ok());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += double{x[r * d + i]} * x[r * d + i];
    const double inv = 1.0 / std::sqrt(ss / d + 1e-5);
    for (int i = 0; i < d; ++i) ref[r * d + i] = static_cast<float>(x[r * d + i] * inv * w[i]);
  }
  EXPECT_LT(MaxRelDiff(y, ref), 1e-5);
  ASSERT_TRUE(b().LayerNorm(x.data(), w.data(), bias.data(), y.data(), rows, d, 1e-5f).ok());
  for (int r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < d; ++i) mean += x[r * d + i];
    mean /= d;
    for (int i = 0; i < d; ++i) var += (x[r * d + i] - mean) * (x[r * d + i] - mean);
    const double inv = 1.0 / std::sqrt(var / d + 1e-5);
    for (int i = 0; i < d; ++i) ref[r * d + i] = static_cast<float>((x[r * d + i] - mean) * inv * w[i] + bias[i]);
  }
  EXPECT_LT(MaxRelDiff(y, ref), 1e-5);

  struct Act {
    Activation kind;
    double (*f)(double);
  };
  const Act acts[] = {
      {Activation::kQuickGelu, [](double v) { return v / (1 + std::exp(-1.702 * v)); }},
      {Activation::kGelu, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }},
      {Activation::kGeluTanh, [](double v) {
         return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
       }}};
  for (const Act& a : acts) {
    y = x;
    ASSERT_TRUE(b().Activate(a.kind, y.data(), static_cast<int64_t>(y.size())).ok());
    for (size_t i = 0; i < x.size(); ++i) ref[i] = static_cast<float>(a.f(x[i]));
    EXPECT_LT(MaxRelDiff(y, ref), 1e-5) << static_cast<int>(a.kind);
  }
  auto up = Random(x.size(), 7);
  y = x;
  ASSERT_TRUE(b().SiluMul(y.data(), up.data(), static_cast<int64_t>(y.size())).ok());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = static_cast<float>(x[i] / (1 + std::exp(-double{x[i]})) * up[i]);
  EXPECT_LT(MaxRelDiff(y, ref), 1e-5);
  y = x;
  ASSERT_TRUE(b().Add(y.data(), up.data(), static_cast<int64_t>(y.size())).ok());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], x[i] + up[i]);
}

// RoPE rotate-half with original position ids: pair (i, i + hd/2) turns by pos · θ^(-2i/hd).
TEST_P(BackendTest, RopeUsesEachRowsPositionId) {
  const int rows = 3, heads = 2, hd = 8;
  const float theta = 10000.f;
  const int32_t pos[rows] = {0, 7, 3};
  auto x = Random(rows * heads * hd, 8);
  std::vector<float> y = x;
  ASSERT_TRUE(b().Rope(y.data(), pos, rows, heads, hd, theta).ok());
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const float* in = x.data() + (r * heads + h) * hd;
      const float* out = y.data() + (r * heads + h) * hd;
      for (int i = 0; i < hd / 2; ++i) {
        const double ang = pos[r] * std::pow(double{theta}, -2.0 * i / hd);
        EXPECT_NEAR(out[i], in[i] * std::cos(ang) - in[i + hd / 2] * std::sin(ang), 1e-5);
        EXPECT_NEAR(out[i + hd / 2], in[i + hd / 2] * std::cos(ang) + in[i] * std::sin(ang), 1e-5);
      }
    }
  }
}

TEST_P(BackendTest, AttentionWithLogSumExpAndDecodeOverSpans) {
  const int n = 19, heads = 4, kv_heads = 2, hd = 16;
  auto q = Random(n * heads * hd, 9), k = Random(n * kv_heads * hd, 10), v = Random(n * kv_heads * hd, 11);
  std::vector<float> out(q.size()), ref(q.size()), lse(heads * n), lse_ref(lse.size());
  AttentionArgs a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.n_q = a.n_kv = n;
  a.n_heads = heads;
  a.n_kv_heads = kv_heads;
  a.head_dim = hd;
  a.scale = 0.25f;
  a.causal = true;
  a.out = out.data();
  a.lse = lse.data();
  ASSERT_TRUE(b().Attention(a).ok());
  a.out = ref.data();
  a.lse = lse_ref.data();
  cpu::AttentionReference(a);
  EXPECT_LT(MaxRelDiff(out, ref), 1e-4);
  EXPECT_LT(MaxRelDiff(lse, lse_ref), 1e-5);

  // The last row attends to every key: the decode op over 3 spans must agree with it.
  std::vector<KvSpan> spans;
  for (int r = 0; r < n; r += 7) {
    spans.push_back({k.data() + r * kv_heads * hd, v.data() + r * kv_heads * hd, std::min(7, n - r)});
  }
  DecodeAttentionArgs d;
  d.q = q.data() + (n - 1) * heads * hd;
  d.spans = spans.data();
  d.n_spans = static_cast<int>(spans.size());
  d.kv_dtype = DType::kF32;
  std::vector<float> one(heads * hd);
  d.out = one.data();
  d.n_heads = heads;
  d.n_kv_heads = kv_heads;
  d.head_dim = hd;
  d.scale = 0.25f;
  ASSERT_TRUE(b().DecodeAttention(d).ok());
  std::vector<float> last(ref.end() - heads * hd, ref.end());
  EXPECT_LT(MaxRelDiff(one, last), 1e-4);
}

TEST_P(BackendTest, GatherRowsInPlaceAndOutOfRange) {
  std::vector<int32_t> rows = {10, 11, 12, 13, 14, 15};
  const int idx[] = {0, 2, 5};
  ASSERT_TRUE(b().GatherRows(rows.data(), 6, sizeof(int32_t), idx, 3, rows.data()).ok());
  EXPECT_EQ(rows[0], 10);
  EXPECT_EQ(rows[1], 12);
  EXPECT_EQ(rows[2], 15);
  const int bad[] = {6};
  EXPECT_EQ(b().GatherRows(rows.data(), 6, sizeof(int32_t), bad, 1, rows.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

// The HAP chain on one small layer: text→visual rows, PAQ per head against the reference,
// PAQ-softmax weights summing to 1, the weighted map, token scores as column means, top-k.
TEST_P(BackendTest, PruningOpsAgreeWithTheirDefinitions) {
  const int n_text = 3, n_vis = 6, heads = 2, hd = 8;
  auto q = Random(n_text * heads * hd, 12), k = Random(n_vis * heads * hd, 13);
  kernels::TextVisualAttentionArgs t;
  t.q_text = q.data();
  t.k_vis = k.data();
  t.n_text = n_text;
  t.n_vis = n_vis;
  t.n_heads = t.n_kv_heads = heads;
  t.head_dim = hd;
  t.scale = 0.35f;
  std::vector<float> maps(heads * n_text * n_vis), ref(maps.size());
  std::vector<double> entropy(heads * n_text);
  t.out = maps.data();
  t.row_entropy = entropy.data();
  ASSERT_TRUE(b().TextVisualAttention(t).ok());
  t.out = ref.data();
  t.row_entropy = nullptr;
  ASSERT_TRUE(kernels::TextVisualAttentionReference(t).ok());
  EXPECT_LT(MaxRelDiff(maps, ref), 1e-5);

  std::vector<float> paq(heads), paq_ref(heads), paq_e(heads);
  ASSERT_TRUE(b().Paq(maps.data(), heads, n_text, n_vis, paq.data()).ok());
  ASSERT_TRUE(kernels::PaqReference(maps.data(), heads, n_text, n_vis, paq_ref.data()).ok());
  ASSERT_TRUE(b().PaqFromRowEntropies(maps.data(), entropy.data(), heads, n_text, n_vis, paq_e.data()).ok());
  EXPECT_LT(MaxRelDiff(paq, paq_ref), 1e-5);
  EXPECT_LT(MaxRelDiff(paq_e, paq_ref), 1e-4);

  std::vector<float> wts(heads);
  ASSERT_TRUE(b().PaqSoftmaxWeights(paq.data(), heads, wts.data()).ok());
  EXPECT_NEAR(wts[0] + wts[1], 1.f, 1e-6);
  EXPECT_EQ(wts[0] > wts[1], paq[0] > paq[1]);

  const int64_t size = int64_t{n_text} * n_vis;
  std::vector<float> layer(size), layer2(size);
  ASSERT_TRUE(b().WeightedSumContiguous(maps.data(), wts.data(), heads, size, layer.data()).ok());
  const float* ptrs[] = {maps.data(), maps.data() + size};
  ASSERT_TRUE(b().WeightedSumMaps(ptrs, wts.data(), heads, size, layer2.data()).ok());
  for (int64_t i = 0; i < size; ++i) {
    EXPECT_NEAR(layer[i], wts[0] * maps[i] + wts[1] * maps[size + i], 1e-6);
    EXPECT_NEAR(layer2[i], layer[i], 1e-6);
  }
  std::vector<float> scores(n_vis), some(n_vis);
  ASSERT_TRUE(b().TokenScores(layer.data(), n_text, n_vis, scores.data()).ok());
  for (int i = 0; i < n_vis; ++i) {
    double mean = 0;
    for (int j = 0; j < n_text; ++j) mean += layer[j * n_vis + i];
    EXPECT_NEAR(scores[i], mean / n_text, 1e-6);
  }
  const int sel[] = {2};
  ASSERT_TRUE(b().TokenScoresOfRows(layer.data(), n_text, n_vis, sel, 1, some.data()).ok());
  for (int i = 0; i < n_vis; ++i) EXPECT_NEAR(some[i], layer[2 * n_vis + i], 1e-6);

  const float tied[] = {0.5f, 0.9f, 0.5f, 0.1f, 0.9f};
  int kept[3];
  ASSERT_TRUE(b().StableTopK(tied, 5, 3, kept).ok());
  EXPECT_EQ(kept[0], 0);  // 0.9 at 1 and 4, then 0.5 at 0 (ties to the lower index), ascending
  EXPECT_EQ(kept[1], 1);
  EXPECT_EQ(kept[2], 4);
}

INSTANTIATE_TEST_SUITE_P(All, BackendTest, ::testing::ValuesIn(Backends()),
                         [](const ::testing::TestParamInfo<const Backend*>& info) {
                           return std::string(info.param->name());
                         });

}  // namespace
}  // namespace hap
