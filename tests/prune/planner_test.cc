// The budget planner for LLaVA-1.5-7B, checked against schedules and FLOPs computed directly in
// the test (a plain loop over layers, not the planner's helpers).
#include "runtime/prune/planner.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace hap {
namespace {

constexpr double kD = 4096, kF = 11008;
constexpr int kL = 32, kV = 576;

struct Direct {
  std::vector<int> sizes, tokens, per_layer;
  double average = 0, flops_paper = 0, flops_full = 0, kv = 0;

  // Sums the average, FLOPs and KV fraction over per_layer, with `text` text tokens per layer.
  void SumOverLayers(int text) {
    for (int n : per_layer) {
      average += n / double(kL);
      flops_paper += 4 * n * kD * kD + 2.0 * n * n * kD + 3 * n * kD * kF;
      const double nf = n + text;
      flops_full += 4 * nf * kD * kD + 2 * nf * nf * kD + 3 * nf * kD * kF;
      kv += (text + n) / (double(kL) * (text + kV));
    }
  }
};

// Straight from docs/design.md §3: group g has L/m layers plus one for the first L % m groups
// and max(1, round(V/(1+g)^2)) tokens; F(N) = 4ND² + 2N²D + 3N·D·d_ffn per layer.
Direct Compute(int m, int text) {
  Direct d;
  for (int g = 0; g < m; ++g) {
    d.sizes.push_back(kL / m + (g < kL % m ? 1 : 0));
    const double nv = std::round(kV / ((1.0 + g) * (1.0 + g)));
    d.tokens.push_back(nv < 1 ? 1 : static_cast<int>(nv));
    for (int i = 0; i < d.sizes.back(); ++i) d.per_layer.push_back(d.tokens.back());
  }
  d.SumOverLayers(text);
  return d;
}

double Unpruned(int text) {
  const double n = kV + text;
  return kL * (4 * n * kD * kD + 2 * n * n * kD + 3 * n * kD * kF);
}

Plan MustPlan(const Budget& b, int text = kDefaultTextTokens) {
  absl::StatusOr<Plan> p = MakePlan(ModelDims::Llava15_7B(), b, text);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : Plan{};
}

void ExpectMatches(const Plan& p, int m, int text) {
  const Direct d = Compute(m, text);
  ASSERT_EQ(p.M, m);
  ASSERT_EQ(p.groups.size(), size_t(m));
  int first = 0;
  for (int g = 0; g < m; ++g) {
    EXPECT_EQ(p.groups[g].first_layer, first) << "group " << g;
    EXPECT_EQ(p.groups[g].n_layers, d.sizes[g]) << "group " << g;
    EXPECT_EQ(p.groups[g].visual_tokens, d.tokens[g]) << "group " << g;
    first += d.sizes[g];
  }
  EXPECT_EQ(p.layer_visual_tokens, d.per_layer);
  EXPECT_NEAR(p.average_visual_tokens, d.average, 1e-9);
  EXPECT_NEAR(p.flops_paper, d.flops_paper, 1e-9 * d.flops_paper);
  EXPECT_NEAR(p.flops_full, d.flops_full, 1e-9 * d.flops_full);
  EXPECT_NEAR(p.unpruned_flops_full, Unpruned(text), 1e-9 * Unpruned(text));
  EXPECT_NEAR(p.kv_cache_fraction, d.kv, 1e-12);
  // The paper's closed form for m stages, A = 4VD² + 3VD·d_ffn, B = 2V²D.
  const double A = 4.0 * kV * kD * kD + 3.0 * kV * kD * kF, B = 2.0 * kV * kV * kD;
  const double closed =
      kL / double(m) * (A * (1 - 1.0 / (1 + m)) + B / 3 * (1 - 1 / std::pow(1.0 + m, 3)));
  EXPECT_NEAR(p.flops_closed_form, closed, 1e-9 * closed);
}

TEST(Planner, UnprunedPaperFlopsIs382T) {
  const Plan p = MustPlan(Budget::Retain(576));
  EXPECT_EQ(p.M, 1);
  EXPECT_NEAR(p.unpruned_flops_paper / 1e12, 3.82, 0.005);
  EXPECT_NEAR(p.flops_paper / 1e12, 3.82, 0.005);
  EXPECT_DOUBLE_EQ(p.flops_paper, p.unpruned_flops_paper);
  EXPECT_DOUBLE_EQ(p.average_visual_tokens, 576);
  EXPECT_DOUBLE_EQ(p.kv_cache_fraction, 1.0);
  // Written out: 32·(4·576·4096² + 2·576²·4096 + 3·576·4096·11008) = 3,817,152,184,320.
  EXPECT_DOUBLE_EQ(p.unpruned_flops_paper, 3817152184320.0);
}

TEST(Planner, NoPruningAtFullBudget) {
  for (const Budget& b :
       {Budget::Retain(576), Budget::Retain(1000), Budget::Flops(1.0), Budget::Flops(2.5)}) {
    const Plan p = MustPlan(b);
    EXPECT_EQ(p.M, 1) << b.ToString();
    ASSERT_EQ(p.groups.size(), 1u);
    EXPECT_EQ(p.groups[0].n_layers, 32);
    EXPECT_EQ(p.groups[0].visual_tokens, 576);
    EXPECT_DOUBLE_EQ(p.flops_full_fraction(), 1.0);
  }
}

TEST(Planner, Retain192) {
  const Plan p = MustPlan(Budget::Retain(192));
  ExpectMatches(p, 5, kDefaultTextTokens);
  // Hand check: groups of 7,7,6,6,6 layers at 576,144,64,36,23 tokens; 5778/32 = 180.5625.
  EXPECT_EQ(p.groups[4].visual_tokens, 23);
  EXPECT_EQ(p.groups[1].n_layers, 7);
  EXPECT_EQ(p.groups[2].n_layers, 6);
  EXPECT_DOUBLE_EQ(p.average_visual_tokens, 180.5625);
  // M = 4 (8 layers each) would average 205 > 192.
  EXPECT_GT(Compute(4, 0).average, 192);
}

TEST(Planner, Retain128) {
  const Plan p = MustPlan(Budget::Retain(128));
  ExpectMatches(p, 8, kDefaultTextTokens);
  EXPECT_DOUBLE_EQ(p.average_visual_tokens, 110.0);  // 4·(576+144+64+36+23+16+12+9)/32
}

TEST(Planner, Retain64) {
  const Plan p = MustPlan(Budget::Retain(64));
  ExpectMatches(p, 16, kDefaultTextTokens);
  EXPECT_DOUBLE_EQ(p.average_visual_tokens, 57.0625);  // 2·913/32
  EXPECT_GT(Compute(15, 0).average, 64);               // 79.4: first two groups hold 3 layers
}

TEST(Planner, Retain32) {
  const Plan p = MustPlan(Budget::Retain(32));
  ExpectMatches(p, 32, kDefaultTextTokens);
  EXPECT_DOUBLE_EQ(p.average_visual_tokens, 29.125);  // 932/32
  EXPECT_EQ(p.groups[31].visual_tokens, 1);
  EXPECT_EQ(p.groups[18].visual_tokens, 2);  // 576/361 = 1.6 → 2
  EXPECT_EQ(p.groups[19].visual_tokens, 1);  // 576/400 = 1.44 → 1
}

TEST(Planner, RetainPercentAndTextTokens) {
  absl::StatusOr<Budget> b = ParseRetain("5.6%", 576);
  ASSERT_TRUE(b.ok());
  EXPECT_NEAR(b->value, 32.256, 1e-9);
  EXPECT_EQ(MustPlan(*b).M, 32);
  b = ParseRetain("64", 576);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->value, 64);
  EXPECT_FALSE(ParseRetain("sixty", 576).ok());
  EXPECT_FALSE(ParseRetain("-3", 576).ok());
  EXPECT_FALSE(ParseFlops("0").ok());
  // The text-token count changes only the full-convention figures.
  const Plan p = MustPlan(Budget::Retain(64), 123);
  ExpectMatches(p, 16, 123);
  EXPECT_EQ(p.text_tokens, 123);
}

TEST(Planner, FlopsFractionPicksSmallestM) {
  int unreachable = 0;
  for (double f : {0.9, 0.5, 0.3, 0.2, 0.1}) {
    for (int text : {0, kDefaultTextTokens, 200}) {
      int want = -1;
      for (int m = 1; m <= kL && want < 0; ++m) {
        if (Compute(m, text).flops_full <= f * Unpruned(text)) want = m;
      }
      if (want < 0) {  // text tokens alone cost more than the budget
        EXPECT_EQ(MakePlan(ModelDims::Llava15_7B(), Budget::Flops(f), text).status().code(),
                  absl::StatusCode::kInvalidArgument)
            << f << " " << text;
        ++unreachable;
        continue;
      }
      const Plan p = MustPlan(Budget::Flops(f), text);
      ExpectMatches(p, want, text);
      EXPECT_LE(p.flops_full_fraction(), f);
      if (want > 1) {
        EXPECT_GT(Compute(want - 1, text).flops_full, f * Unpruned(text));
      }
    }
  }
  EXPECT_GT(unreachable, 0);  // e.g. 0.1 with 200 text tokens
  EXPECT_LT(unreachable, 6);
}

TEST(Planner, BelowMinimumNamesTheMinimum) {
  absl::StatusOr<Plan> p = MakePlan(ModelDims::Llava15_7B(), Budget::Retain(20));
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(p.status().message());
  EXPECT_NE(msg.find("retain 20 is below the minimum reachable average of 29.1 visual tokens per "
                     "layer (M = 32 groups, 5.1% of 576)"),
            std::string::npos)
      << msg;
  // Exactly the minimum is reachable.
  EXPECT_EQ(MustPlan(Budget::Retain(29.125)).M, 32);
  EXPECT_FALSE(MakePlan(ModelDims::Llava15_7B(), Budget::Retain(29.12)).ok());

  const double min_frac = Compute(32, kDefaultTextTokens).flops_full / Unpruned(kDefaultTextTokens);
  p = MakePlan(ModelDims::Llava15_7B(), Budget::Flops(min_frac * 0.99));
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  char want[32];
  std::snprintf(want, sizeof(want), "%.4f", min_frac);
  EXPECT_NE(std::string(p.status().message()).find(want), std::string::npos) << p.status();
  EXPECT_EQ(MustPlan(Budget::Flops(min_frac * 1.0000001)).M, 32);
}

TEST(Planner, RejectsNonsense) {
  const ModelDims d = ModelDims::Llava15_7B();
  EXPECT_FALSE(MakePlan(d, Budget::Retain(0)).ok());
  EXPECT_FALSE(MakePlan(d, Budget::Retain(NAN)).ok());
  EXPECT_FALSE(MakePlan(d, Budget::Flops(-0.5)).ok());
  EXPECT_FALSE(PlanForGroups(d, 0).ok());
  EXPECT_FALSE(PlanForGroups(d, 33).ok());
  EXPECT_FALSE(MakePlan(d, Budget::Retain(64), -1).ok());
}

// The flat schedule (hap-flat / uniform-flat): HAP's groups and group 0, every later group at
// one count c chosen for HAP's average, c = round((L·average − n_0·V) / (L − n_0)); costs
// recomputed here by the same direct loop.
TEST(Planner, FlatScheduleKeepsHapGroupsAndAverage) {
  struct Row {
    Budget budget;
    int c;  // hand check of the count (− 1: not checked)
  };
  // 192: (32·180.5625 − 7·576)/25 = 69.84 → 70; 128: (3520 − 2304)/28 = 43.4 → 43;
  // 64: (1826 − 1152)/30 = 22.47 → 22; 32: (932 − 576)/31 = 11.48 → 11.
  for (const Row& r :
       {Row{Budget::Retain(192), 70}, Row{Budget::Retain(128), 43}, Row{Budget::Retain(64), 22},
        Row{Budget::Retain(32), 11}, Row{Budget::Flops(0.5), -1}, Row{Budget::Flops(0.2), -1}}) {
    SCOPED_TRACE(r.budget.ToString());
    const Plan pyr = MustPlan(r.budget);
    absl::StatusOr<Plan> flat =
        MakePlan(ModelDims::Llava15_7B(), r.budget, kDefaultTextTokens, TokenSchedule::kFlat);
    ASSERT_TRUE(flat.ok()) << flat.status();
    EXPECT_EQ(flat->schedule, TokenSchedule::kFlat);
    EXPECT_EQ(pyr.schedule, TokenSchedule::kPyramid);
    ASSERT_EQ(flat->M, pyr.M);
    ASSERT_GT(flat->M, 1);
    const int n0 = pyr.groups[0].n_layers;
    const int c =
        static_cast<int>(std::round((kL * pyr.average_visual_tokens - n0 * kV) / (kL - n0)));
    if (r.c >= 0) {
      EXPECT_EQ(c, r.c);
    }
    Direct d;
    for (int g = 0; g < flat->M; ++g) {
      EXPECT_EQ(flat->groups[g].first_layer, pyr.groups[g].first_layer) << g;
      EXPECT_EQ(flat->groups[g].n_layers, pyr.groups[g].n_layers) << g;
      EXPECT_EQ(flat->groups[g].visual_tokens, g == 0 ? kV : c) << g;
      for (int i = 0; i < pyr.groups[g].n_layers; ++i) d.per_layer.push_back(g == 0 ? kV : c);
    }
    EXPECT_EQ(flat->layer_visual_tokens, d.per_layer);
    d.SumOverLayers(kDefaultTextTokens);
    EXPECT_NEAR(flat->average_visual_tokens, d.average, 1e-9);
    EXPECT_NEAR(flat->flops_paper, d.flops_paper, 1e-9 * d.flops_paper);
    EXPECT_NEAR(flat->flops_full, d.flops_full, 1e-9 * d.flops_full);
    EXPECT_NEAR(flat->kv_cache_fraction, d.kv, 1e-12);
    EXPECT_DOUBLE_EQ(flat->unpruned_flops_full, pyr.unpruned_flops_full);
    // The same average as HAP's plan up to rounding c, and so within the retain budget as HAP's
    // is (up to that rounding).
    EXPECT_LE(std::abs(flat->average_visual_tokens - pyr.average_visual_tokens),
              0.5 * (kL - n0) / kL);
    if (r.budget.kind == Budget::Kind::kRetain) {
      EXPECT_LE(flat->average_visual_tokens, r.budget.value + 0.5);
    }
    // FLOPs: the linear terms dominate at these counts, so (nearly) the same average costs
    // (nearly) the same: −0.7% to +0.02% here (+ when c rounds up, as at 192).
    EXPECT_NEAR(flat->flops_full / pyr.flops_full, 1.0, 1e-2);
  }
  // Unpruned budgets stay unpruned; the minimum is HAP's; only a pyramid plan flattens.
  absl::StatusOr<Plan> full = MakePlan(ModelDims::Llava15_7B(), Budget::Retain(576),
                                       kDefaultTextTokens, TokenSchedule::kFlat);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->M, 1);
  EXPECT_DOUBLE_EQ(full->average_visual_tokens, 576);
  absl::StatusOr<Plan> low = MakePlan(ModelDims::Llava15_7B(), Budget::Retain(20),
                                      kDefaultTextTokens, TokenSchedule::kFlat);
  ASSERT_EQ(low.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(low.status().message()).find("29.1"), std::string::npos);
  EXPECT_EQ(FlattenPlan(*full).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_STREQ(TokenScheduleName(TokenSchedule::kFlat), "flat");
}

// Small pyramids whose tail is already flat at 1 token (V = 16 over 8 groups): the flat count
// is the pruned groups' layer-weighted mean, never below 1.
TEST(Planner, FlatScheduleOnSmallModels) {
  ModelDims d;
  d.n_layers = 8;
  d.n_visual_tokens = 16;
  for (int m = 2; m <= 8; ++m) {
    absl::StatusOr<Plan> pyr = PlanForGroups(d, m);
    ASSERT_TRUE(pyr.ok());
    absl::StatusOr<Plan> flat = FlattenPlan(*pyr);
    ASSERT_TRUE(flat.ok());
    double sum = 0, layers = 0;
    for (int g = 1; g < m; ++g) {
      sum += pyr->groups[g].n_layers * pyr->groups[g].visual_tokens;
      layers += pyr->groups[g].n_layers;
    }
    const int c = std::max(1, static_cast<int>(std::round(sum / layers)));
    for (int g = 1; g < m; ++g) EXPECT_EQ(flat->groups[g].visual_tokens, c) << m << " " << g;
    EXPECT_EQ(flat->groups[0].visual_tokens, 16);
  }
}

TEST(Planner, GroupOfLayer) {
  const Plan p = MustPlan(Budget::Retain(192));  // 7,7,6,6,6
  EXPECT_EQ(p.GroupOfLayer(0), 0);
  EXPECT_EQ(p.GroupOfLayer(6), 0);
  EXPECT_EQ(p.GroupOfLayer(7), 1);
  EXPECT_EQ(p.GroupOfLayer(14), 2);
  EXPECT_EQ(p.GroupOfLayer(31), 4);
  EXPECT_EQ(p.GroupOfLayer(32), -1);
}

}  // namespace
}  // namespace hap
