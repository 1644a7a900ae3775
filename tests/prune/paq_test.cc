// PAQ, PAQ-softmax weights, weighted map sums and token scores against hand-computed values and
// the definition.
#include "kernels/cpu/prune/paq.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/prune/paq_softmax.h"
#include "kernels/cpu/prune/token_scores.h"
#include "kernels/cpu/prune/weighted_sum.h"
#include "tests/prune/reference.h"

namespace hap {
namespace {

float PaqOf(const std::vector<float>& map, int n_text, int n_vis) {
  float out = -1.f;
  EXPECT_TRUE(kernels::Paq(map.data(), 1, n_text, n_vis, &out).ok());
  return out;
}

TEST(Paq, SinkHeadIsZero) {
  // Every text row puts all its mass on visual token 2.
  const std::vector<float> map = {0, 0, 1, 0, 0,  //
                                  0, 0, 1, 0, 0,  //
                                  0, 0, 1, 0, 0};
  EXPECT_EQ(PaqOf(map, 3, 5), 0.f);  // H_v = 0 → defined as 0
}

TEST(Paq, DispersedHeadIsZero) {
  std::vector<float> map(4 * 6, 1.f / 6);
  EXPECT_NEAR(PaqOf(map, 4, 6), 0.f, 1e-6);
}

TEST(Paq, IdenticalNonUniformRowsAreZero) {
  const std::vector<float> row = {0.1f, 0.6f, 0.3f};
  std::vector<float> map;
  for (int j = 0; j < 5; ++j) map.insert(map.end(), row.begin(), row.end());
  EXPECT_NEAR(PaqOf(map, 5, 3), 0.f, 1e-6);
}

TEST(Paq, DistinctOneHotRowsAreOne) {
  // Three text rows on three different visual tokens; token 3 unused.
  const std::vector<float> map = {1, 0, 0, 0,  //
                                  0, 1, 0, 0,  //
                                  0, 0, 1, 0};
  EXPECT_NEAR(PaqOf(map, 3, 4), 1.f, 1e-6);
  // Two rows, two tokens.
  EXPECT_NEAR(PaqOf({0, 1, 1, 0}, 2, 2), 1.f, 1e-6);
}

TEST(Paq, HandComputed2x2) {
  // A = [[1, 0], [0.5, 0.5]], N_t = 2: p(v) = [0.75, 0.25].
  // I  = ½·1·ln(1/0.75) + ½·0.5·ln(0.5/0.75) + ½·0.5·ln(0.5/0.25) = 0.2157616
  // Hv = −(0.75 ln 0.75 + 0.25 ln 0.25) = 0.5623351,  PAQ = 0.3836885
  const double i =
      0.5 * std::log(1 / 0.75) + 0.25 * std::log(0.5 / 0.75) + 0.25 * std::log(0.5 / 0.25);
  const double hv = -(0.75 * std::log(0.75) + 0.25 * std::log(0.25));
  EXPECT_NEAR(i / hv, 0.3836885, 1e-6);
  EXPECT_NEAR(PaqOf({1, 0, 0.5f, 0.5f}, 2, 2), 0.3836885, 1e-6);
}

TEST(Paq, HandComputed2x3) {
  // A = [[.5, .5, 0], [0, .5, .5]]: p(v) = [.25, .5, .25], Hv = 1.5 ln 2, I = 0.5 ln 2 → 1/3.
  EXPECT_NEAR(PaqOf({0.5f, 0.5f, 0, 0, 0.5f, 0.5f}, 2, 3), 1.0 / 3.0, 1e-6);
}

TEST(Paq, HandComputed3x2) {
  // A = [[.9, .1], [.2, .8], [.5, .5]]: p(v) = [1.6/3, 1.4/3].
  const double p0 = 1.6 / 3, p1 = 1.4 / 3;
  const double i =
      (0.9 * std::log(0.9 / p0) + 0.1 * std::log(0.1 / p1) + 0.2 * std::log(0.2 / p0) +
       0.8 * std::log(0.8 / p1) + 0.5 * std::log(0.5 / p0) + 0.5 * std::log(0.5 / p1)) /
      3;
  const double hv = -(p0 * std::log(p0) + p1 * std::log(p1));
  EXPECT_NEAR(i / hv, 0.2673415, 1e-6);
  EXPECT_NEAR(PaqOf({0.9f, 0.1f, 0.2f, 0.8f, 0.5f, 0.5f}, 3, 2), 0.2673415, 1e-6);
}

TEST(Paq, RandomMapsMatchDefinitionAndStayInUnitInterval) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  double worst = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int nt = 1 + trial % 9, nv = 1 + (trial * 7) % 37;
    const double sharp = 1 + trial % 5;  // exponent: larger → peakier rows
    std::vector<std::vector<double>> ref(nt, std::vector<double>(nv));
    std::vector<float> map(nt * nv);
    for (int j = 0; j < nt; ++j) {
      double z = 0;
      for (int i = 0; i < nv; ++i) z += (ref[j][i] = std::pow(u(rng), 4 * sharp));
      for (int i = 0; i < nv; ++i) map[j * nv + i] = static_cast<float>(ref[j][i] /= z);
    }
    const float got = PaqOf(map, nt, nv);
    ASSERT_TRUE(std::isfinite(got));
    EXPECT_GE(got, 0.f);
    EXPECT_LE(got, 1.f);
    worst = std::max(worst, std::abs(got - testref::Paq(ref)));
  }
  EXPECT_LT(worst, 1e-5) << "worst |PAQ − definition| over 200 random maps";
}

TEST(Paq, BatchedMapsAreIndependent) {
  const std::vector<float> maps = {1,    0,    0.5f, 0.5f,   // 0.3836885
                                   0,    1,    1,    0,      // 1
                                   0.5f, 0.5f, 0.5f, 0.5f};  // 0
  std::vector<float> out(3);
  ASSERT_TRUE(kernels::Paq(maps.data(), 3, 2, 2, out.data()).ok());
  EXPECT_NEAR(out[0], 0.3836885, 1e-6);
  EXPECT_NEAR(out[1], 1.0, 1e-6);
  EXPECT_NEAR(out[2], 0.0, 1e-6);
}

TEST(Paq, RejectsMapsThatAreNotRowStochastic) {
  float out;
  const std::vector<float> unnormalised = {0.5f, 0.2f, 0.5f, 0.5f};
  EXPECT_EQ(kernels::Paq(unnormalised.data(), 1, 2, 2, &out).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<float> negative = {1.5f, -0.5f};
  EXPECT_EQ(kernels::Paq(negative.data(), 1, 1, 2, &out).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<float> nan = {NAN, 1.f};
  EXPECT_EQ(kernels::Paq(nan.data(), 1, 1, 2, &out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels::Paq(nan.data(), 1, 0, 2, &out).code(), absl::StatusCode::kInvalidArgument);
}

TEST(PaqSoftmax, CentredSoftmax) {
  const std::vector<float> paq = {0.2f, 0.9f, 0.4f};
  std::vector<float> w(3);
  ASSERT_TRUE(kernels::PaqSoftmaxWeights(paq.data(), 3, w.data()).ok());
  // mean 0.5: s = [−0.3, 0.4, −0.1]
  const double z = std::exp(-0.3) + std::exp(0.4) + std::exp(-0.1);
  EXPECT_NEAR(w[0], std::exp(-0.3) / z, 1e-7);
  EXPECT_NEAR(w[1], std::exp(0.4) / z, 1e-7);
  EXPECT_NEAR(w[2], std::exp(-0.1) / z, 1e-7);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-7);
}

// The paper's PAQ-softmax exactly as the op computed it before it took a temperature: F64,
// centred, max subtracted, sequential sums. τ = 1 must reproduce it bit for bit.
std::vector<float> PaperPaqSoftmax(const std::vector<float>& paq) {
  const int n = static_cast<int>(paq.size());
  double mean = 0.0;
  for (float p : paq) mean += p;
  mean /= n;
  double mx = -1e300;
  for (float p : paq) mx = std::max(mx, p - mean);
  std::vector<double> e(n);
  double sum = 0.0;
  for (int c = 0; c < n; ++c) sum += (e[c] = std::exp((paq[c] - mean) - mx));
  std::vector<float> w(n);
  for (int c = 0; c < n; ++c) w[c] = static_cast<float>(e[c] / sum);
  return w;
}

std::vector<float> RandomPaq(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> paq(n);
  for (float& p : paq) p = u(rng);
  return paq;
}

TEST(PaqSoftmax, TemperatureOneIsBitIdenticalToThePapersOp) {
  for (int n : {1, 2, 3, 7, 32, 33, 100}) {
    const std::vector<float> paq = RandomPaq(n, 70 + n);
    std::vector<float> plain(n), tau1(n);
    ASSERT_TRUE(kernels::PaqSoftmaxWeights(paq.data(), n, plain.data()).ok());
    ASSERT_TRUE(kernels::PaqSoftmaxWeights(paq.data(), n, 1.0, tau1.data()).ok());
    const std::vector<float> paper = PaperPaqSoftmax(paq);
    for (int c = 0; c < n; ++c) {
      // Bit for bit, not merely close.
      EXPECT_EQ(std::memcmp(&tau1[c], &plain[c], sizeof(float)), 0) << "n " << n << " c " << c;
      EXPECT_EQ(std::memcmp(&tau1[c], &paper[c], sizeof(float)), 0) << "n " << n << " c " << c;
    }
  }
}

TEST(PaqSoftmax, TemperatureMatchesDirectRecomputation) {
  for (double tau : {0.01, 0.05, 0.3, 2.5, 100.0}) {
    for (int n : {1, 3, 8, 32, 33}) {
      const std::vector<float> paq = RandomPaq(n, 90 + n);
      std::vector<float> w(n);
      ASSERT_TRUE(kernels::PaqSoftmaxWeights(paq.data(), n, tau, w.data()).ok());
      // Direct: w_c = exp((p_c − mean)/τ) / Σ exp(...), in long double with its own max shift.
      long double mean = 0;
      for (float p : paq) mean += p;
      mean /= n;
      long double mx = -1e300L;
      for (float p : paq) mx = std::max(mx, (p - mean) / tau);
      long double z = 0;
      for (float p : paq) z += std::exp((p - mean) / tau - mx);
      double total = 0;
      for (int c = 0; c < n; ++c) {
        const double want = static_cast<double>(std::exp((paq[c] - mean) / tau - mx) / z);
        EXPECT_NEAR(w[c], want, 1e-7 + 1e-6 * want) << "tau " << tau << " n " << n << " c " << c;
        total += w[c];
      }
      EXPECT_NEAR(total, 1.0, 1e-6);
    }
  }
  // A hand case: PAQ [0.2, 0.9, 0.4] at τ = 0.1: s = [−3, 4, −1].
  const std::vector<float> paq = {0.2f, 0.9f, 0.4f};
  std::vector<float> w(3);
  ASSERT_TRUE(kernels::PaqSoftmaxWeights(paq.data(), 3, 0.1, w.data()).ok());
  const double z = std::exp(-3.0) + std::exp(4.0) + std::exp(-1.0);
  EXPECT_NEAR(w[0], std::exp(-3.0) / z, 1e-6);
  EXPECT_NEAR(w[1], std::exp(4.0) / z, 1e-6);
  EXPECT_NEAR(w[2], std::exp(-1.0) / z, 1e-6);
}

TEST(PaqSoftmax, RejectsABadTemperature) {
  const std::vector<float> paq = {0.2f, 0.9f, 0.4f};
  std::vector<float> w(3);
  for (double tau : {0.0, -1.0, double(NAN), double(INFINITY), -double(INFINITY)}) {
    const absl::Status s = kernels::PaqSoftmaxWeights(paq.data(), 3, tau, w.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << tau;
    EXPECT_NE(s.message().find("temperature"), std::string::npos) << s.message();
  }
}

// With PAQ ∈ [0, 1] at τ = 1 weights differ by at most a factor e, so N_eff = 1/Σw² stays
// ≥ 25.2 of 32 heads whatever the model; lowering τ concentrates the weights.
TEST(PaqSoftmax, EffectiveHeadsFallAsTemperatureFalls) {
  const int H = 32;
  // A synthetic layer: spread PAQs, the extreme case (half the heads at 0, half at 1) included.
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::vector<float> paq = RandomPaq(H, seed);
    if (seed == 3) {
      for (int h = 0; h < H; ++h) paq[h] = h < H / 2 ? 0.f : 1.f;
    }
    double prev_neff = H + 1.0, prev_kl = -1.0;
    for (double tau : {100.0, 10.0, 1.0, 0.3, 0.1, 0.05, 0.01}) {
      std::vector<float> w(H);
      ASSERT_TRUE(kernels::PaqSoftmaxWeights(paq.data(), H, tau, w.data()).ok());
      double w2 = 0, kl = 0;
      for (float x : w) {
        w2 += double(x) * x;
        if (x > 0) kl += x * std::log(double(x) * H);
      }
      const double neff = 1.0 / w2;
      // Strictly while the F32 weights can still tell (the 0/1 layer saturates at 16 heads by
      // τ = 0.05), never up.
      if (tau >= 0.1) {
        EXPECT_LT(neff, prev_neff) << "seed " << seed << " tau " << tau;
        EXPECT_GT(kl, prev_kl) << "seed " << seed << " tau " << tau;
      } else {
        EXPECT_LE(neff, prev_neff * (1 + 1e-9)) << "seed " << seed << " tau " << tau;
        EXPECT_GE(kl, prev_kl - 1e-9) << "seed " << seed << " tau " << tau;
      }
      if (tau == 1.0) {
        EXPECT_GE(neff, 25.2) << "the τ = 1 bound";
        EXPECT_LE(kl, 0.123) << "the τ = 1 bound";
      }
      if (tau == 0.05) {
        EXPECT_LT(neff, 25.2) << "seed " << seed << ": τ = 0.05 goes below the τ = 1 bound";
        EXPECT_GT(kl, 0.123) << "seed " << seed;
      }
      prev_neff = neff;
      prev_kl = kl;
    }
    EXPECT_LT(prev_neff, 17.0) << "τ = 0.01 leaves about the top-PAQ heads";
  }
}

TEST(PaqSoftmax, QueryDependentHeadOutweighsSinkInATwoHeadLayer) {
  // Head 0: a sink (all rows on token 0). Head 1: each text row on its own token.
  const int nt = 3, nv = 4;
  const std::vector<float> heads = {1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0,   // head 0
                                    0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};  // head 1
  std::vector<float> paq(2), w(2);
  ASSERT_TRUE(kernels::Paq(heads.data(), 2, nt, nv, paq.data()).ok());
  EXPECT_NEAR(paq[0], 0.0, 1e-6);
  EXPECT_NEAR(paq[1], 1.0, 1e-6);
  ASSERT_TRUE(kernels::PaqSoftmaxWeights(paq.data(), 2, w.data()).ok());
  // s = [−0.5, 0.5] → w_1 = 1 / (1 + e^−1) = 0.7310586
  EXPECT_GT(w[1], w[0]);
  EXPECT_NEAR(w[1], 0.7310586, 1e-6);
  EXPECT_NEAR(w[0], 0.2689414, 1e-6);
  // Aggregated layer map and its scores follow the weights.
  std::vector<float> layer(nt * nv), scores(nv);
  ASSERT_TRUE(
      kernels::WeightedSumContiguous(heads.data(), w.data(), 2, nt * nv, layer.data()).ok());
  EXPECT_NEAR(layer[0], 0.2689414, 1e-6);  // row 0, token 0: sink head only
  EXPECT_NEAR(layer[1], 0.7310586, 1e-6);  // row 0, token 1: query head only
  ASSERT_TRUE(kernels::TokenScores(layer.data(), nt, nv, scores.data()).ok());
  EXPECT_NEAR(scores[0], 0.2689414, 1e-6);
  EXPECT_NEAR(scores[1], 0.7310586 / 3, 1e-6);
  EXPECT_NEAR(scores[3], 0.7310586 / 3, 1e-6);
}

TEST(WeightedSum, SeparateBuffers) {
  const std::vector<float> a = {1, 2, 3}, b = {10, 20, 30}, c = {-1, 0, 1};
  const float* maps[] = {a.data(), b.data(), c.data()};
  const float w[] = {0.5f, 0.25f, 2.f};
  std::vector<float> out(3);
  ASSERT_TRUE(kernels::WeightedSumMaps(maps, w, 3, 3, out.data()).ok());
  EXPECT_FLOAT_EQ(out[0], 0.5f + 2.5f - 2.f);
  EXPECT_FLOAT_EQ(out[1], 1.f + 5.f + 0.f);
  EXPECT_FLOAT_EQ(out[2], 1.5f + 7.5f + 2.f);
}

TEST(TokenScores, MeanOverRowsAndOverSelectedRows) {
  // F32 [3, 2]
  const std::vector<float> map = {1, 2, 3, 4, 5, 9};
  std::vector<float> s(2);
  ASSERT_TRUE(kernels::TokenScores(map.data(), 3, 2, s.data()).ok());
  EXPECT_FLOAT_EQ(s[0], 3.f);
  EXPECT_FLOAT_EQ(s[1], 5.f);
  const int rows[] = {0, 2};
  ASSERT_TRUE(kernels::TokenScoresOfRows(map.data(), 3, 2, rows, 2, s.data()).ok());
  EXPECT_FLOAT_EQ(s[0], 3.f);
  EXPECT_FLOAT_EQ(s[1], 5.5f);
  const int bad[] = {3};
  EXPECT_FALSE(kernels::TokenScoresOfRows(map.data(), 3, 2, bad, 1, s.data()).ok());
}

}  // namespace
}  // namespace hap
