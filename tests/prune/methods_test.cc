// Each pruning method on synthetic layers (random Q/K, exact LSE): its kept sets equal a slow
// recomputation from the full attention maps, written here from docs/design.md §3/§4.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/prune/dart_pruner.h"
#include "runtime/prune/factory.h"
#include "runtime/prune/hap_pruner.h"
#include "runtime/prune/last_token_pruner.h"
#include "runtime/prune/planner.h"
#include "runtime/prune/pruner_base.h"
#include "runtime/prune/random_pruner.h"
#include "runtime/prune/sparsevlm_pruner.h"
#include "tests/prune/reference.h"
#include "tests/prune/sim.h"

namespace hap {
namespace {

using testref::LayerView;
using testref::RefPrune;

ModelDims SmallDims() {
  return ModelDims{.n_layers = 32,
                   .d_model = 64,
                   .d_ffn = 160,
                   .n_heads = 4,
                   .n_kv_heads = 2,  // GQA
                   .head_dim = 8,
                   .n_visual_tokens = 144};
}

testref::SimSpec Spec(uint64_t seed) {
  testref::SimSpec s;
  s.dims = SmallDims();
  s.seed = seed;
  return s;
}

// Layer 0 as the engine hands it over, for the hand-built cases: d's head layout, Q/K/LSE in
// caller-owned buffers (which must outlive it), the image at tokens [vis_begin, vis_begin + n_vis).
LayerAttention HandLayer(const ModelDims& d, int n_tokens, float scale, const std::vector<float>& q,
                         const std::vector<float>& k, const std::vector<float>& lse, int vis_begin,
                         int n_vis) {
  return LayerAttention{.n_tokens = n_tokens,
                        .n_heads = d.n_heads,
                        .n_kv_heads = d.n_kv_heads,
                        .head_dim = d.head_dim,
                        .scale = scale,
                        .q = q.data(),
                        .k = k.data(),
                        .lse = lse.data(),
                        .vis_begin = vis_begin,
                        .n_vis = n_vis};
}

// Â_h rows of the query text, renormalised over the visual tokens present: [n_text][n_vis].
std::vector<std::vector<double>> Renormalised(const LayerView& v, int h) {
  std::vector<std::vector<double>> a(v.n_tokens - v.text_begin, std::vector<double>(v.n_vis));
  for (int j = 0; j < static_cast<int>(a.size()); ++j) {
    double s = 0;
    for (int i = 0; i < v.n_vis; ++i) s += v.p[h][v.text_begin + j][v.vis_begin + i];
    for (int i = 0; i < v.n_vis; ++i) a[j][i] = v.p[h][v.text_begin + j][v.vis_begin + i] / s;
  }
  return a;
}

// HAP / uniform straight from docs/design.md §3. Groups recomputed here from M: L/M layers each,
// the first L % M groups one more; N_v(g) = max(1, round(V/(1+g)^2)). flat (hap-flat /
// uniform-flat, planner.h TokenSchedule::kFlat): groups 1..M−1 all keep the count that gives the
// pyramid's average, round((L·average − |group 0|·V) / (L − |group 0|)). tau: the PAQ-softmax
// temperature of the head and layer weights, w ∝ exp((PAQ − mean) / τ).
class HapReference {
 public:
  HapReference(int L, int V, int M, bool uniform, bool flat = false, double tau = 1.0)
      : uniform_(uniform), tau_(tau) {
    int first = 0;
    double sum = 0;
    std::vector<int> sizes;
    for (int g = 0; g < M; ++g) {
      const int size = L / M + (g < L % M ? 1 : 0);
      sizes.push_back(size);
      last_.push_back(first + size - 1);
      tokens_.push_back(std::max(1, int(std::round(V / ((1.0 + g) * (1.0 + g))))));
      sum += double(size) * tokens_.back();
      first += size;
    }
    if (flat && M > 1) {
      const int c = int(std::round((sum - double(sizes[0]) * V) / (L - sizes[0])));
      for (int g = 1; g < M; ++g) tokens_[g] = c;
    }
  }

  std::optional<RefPrune> operator()(const LayerView& v, const Pruner& pruner) {
    int g = 0;
    while (v.layer > last_[g]) ++g;
    if (g == static_cast<int>(last_.size()) - 1) return std::nullopt;
    const int H = static_cast<int>(v.p.size());
    std::vector<std::vector<std::vector<double>>> heads(H);
    std::vector<double> paq(H);
    for (int h = 0; h < H; ++h) {
      heads[h] = Renormalised(v, h);
      paq[h] = testref::Paq(heads[h]);
    }
    const std::vector<double> w =
        uniform_ ? std::vector<double>(H, 1.0 / H) : testref::SoftmaxCentered(paq, tau_);
    std::vector<std::vector<double>> layer(heads[0].size(), std::vector<double>(v.n_vis, 0.0));
    for (int h = 0; h < H; ++h)
      for (size_t j = 0; j < layer.size(); ++j)
        for (int i = 0; i < v.n_vis; ++i) layer[j][i] += w[h] * heads[h][j][i];
    const double layer_paq = testref::Paq(layer);

    head_weight_spread_ = std::max(head_weight_spread_, *std::max_element(w.begin(), w.end()) -
                                                            *std::min_element(w.begin(), w.end()));
    maps_.push_back(layer);
    layer_paq_.push_back(layer_paq);
    expected_layers_.push_back({v.layer, paq, w, layer_paq});
    // The explain records of a group's layers appear with its pruning step (a device backend
    // keeps the PAQs and weights until that step's sync): none before.
    const PruneStats& st = pruner.stats();
    if (v.layer != last_[g]) {
      EXPECT_EQ(st.hap_layers.size(), layers_recorded_) << "layer " << v.layer;
      return std::nullopt;
    }

    // The explain record of each layer of the group, now complete.
    EXPECT_EQ(st.hap_layers.size(), layers_recorded_ + expected_layers_.size());
    for (size_t i = 0; i < expected_layers_.size() && layers_recorded_ + i < st.hap_layers.size();
         ++i) {
      const ExpectedLayer& e = expected_layers_[i];
      const HapLayerExplain& x = st.hap_layers[layers_recorded_ + i];
      EXPECT_EQ(x.layer, e.layer);
      EXPECT_EQ(x.n_vis, v.n_vis);
      EXPECT_EQ(x.head_paq.size(), e.paq.size());
      EXPECT_EQ(x.head_weights.size(), e.w.size());
      if (x.head_paq.size() != e.paq.size() || x.head_weights.size() != e.w.size()) continue;
      for (int h = 0; h < H; ++h) {
        EXPECT_NEAR(x.head_paq[h], e.paq[h], 2e-5) << "layer " << e.layer << " head " << h;
        EXPECT_NEAR(x.head_weights[h], e.w[h], 1e-5) << "layer " << e.layer << " head " << h;
      }
      EXPECT_NEAR(x.layer_paq, e.layer_paq, 2e-5) << "layer " << e.layer;
    }
    layers_recorded_ = st.hap_layers.size();
    expected_layers_.clear();

    const std::vector<double> lw = uniform_ ? std::vector<double>(maps_.size(), 1.0 / maps_.size())
                                            : testref::SoftmaxCentered(layer_paq_, tau_);
    RefPrune out;
    out.scores.assign(v.n_vis, 0.0);
    const int nt = static_cast<int>(layer.size());
    for (size_t c = 0; c < maps_.size(); ++c)
      for (int j = 0; j < nt; ++j)
        for (int i = 0; i < v.n_vis; ++i) out.scores[i] += lw[c] * maps_[c][j][i] / nt;
    out.keep = std::min(tokens_[g + 1], v.n_vis);
    if (!st.hap_groups.empty()) {
      const HapGroupExplain& gx = st.hap_groups.back();
      EXPECT_EQ(gx.group, g);
      EXPECT_EQ(gx.n_layers, static_cast<int>(maps_.size()));
      for (size_t c = 0; c < lw.size(); ++c) EXPECT_NEAR(gx.layer_weights[c], lw[c], 1e-5);
      for (int i = 0; i < v.n_vis; ++i) EXPECT_NEAR(gx.token_scores[i], out.scores[i], 1e-6);
      for (size_t r = 0; r < gx.kept.size(); ++r) {
        EXPECT_EQ(gx.kept_original[r], v.present[gx.kept[r]]);
      }
      group_kept_.push_back(gx.kept_original);
    }
    maps_.clear();
    layer_paq_.clear();
    ++groups_checked_;
    return out;
  }

  int groups_checked_ = 0;
  double head_weight_spread_ = 0;
  std::vector<std::vector<int>> group_kept_;

 private:
  struct ExpectedLayer {
    int layer;
    std::vector<double> paq, w;
    double layer_paq;
  };
  bool uniform_;
  double tau_;
  std::vector<int> last_, tokens_;
  std::vector<std::vector<std::vector<double>>> maps_;
  std::vector<double> layer_paq_;
  std::vector<ExpectedLayer> expected_layers_;  // the current group's layers so far
  size_t layers_recorded_ = 0;                  // hap_layers entries checked
};

TEST(HapMethod, KeptSetsMatchDirectRecomputation) {
  const ModelDims dims = SmallDims();
  struct Variant {
    bool uniform, flat;
    double tau = 1.0;  // PAQ-softmax temperature (hap, hap-flat)
  };
  for (int m : {1, 5, 8, 32}) {
    for (const Variant& var :
         {Variant{false, false}, Variant{true, false}, Variant{false, true}, Variant{true, true},
          Variant{false, false, 0.05}, Variant{false, true, 0.05}}) {
      const bool uniform = var.uniform, flat = var.flat;
      const std::string name = std::string(uniform ? "uniform" : "hap") + (flat ? "-flat" : "");
      SCOPED_TRACE(testing::Message() << "M=" << m << " " << name << " tau " << var.tau);
      const absl::StatusOr<Plan> pyramid = PlanForGroups(dims, m);
      ASSERT_TRUE(pyramid.ok());
      const absl::StatusOr<Plan> plan = flat ? FlattenPlan(*pyramid) : pyramid;
      ASSERT_TRUE(plan.ok()) << plan.status();
      HapPruner pruner(*plan, dims,
                       uniform ? HapPruner::Weighting::kUniform : HapPruner::Weighting::kPaqSoftmax,
                       var.tau);
      EXPECT_EQ(pruner.stats().method, name);
      EXPECT_EQ(pruner.stats().paq_temperature, var.tau);
      testref::Sim sim(Spec(42));
      HapReference ref(dims.n_layers, dims.n_visual_tokens, m, uniform, flat, var.tau);
      int swaps = 0;
      const std::vector<int> per_layer = sim.Run(
          pruner, [&](const LayerView& v, const Pruner& p) { return ref(v, p); }, &swaps);
      EXPECT_EQ(ref.groups_checked_, m - 1);
      EXPECT_EQ(swaps, 0);
      EXPECT_EQ(per_layer, plan->layer_visual_tokens);
      EXPECT_EQ(pruner.stats().layer_tokens, per_layer);
      EXPECT_DOUBLE_EQ(pruner.stats().achieved_average_visual_tokens(),
                       plan->average_visual_tokens);
      EXPECT_EQ(static_cast<int>(pruner.stats().stages.size()), m - 1);
      if (!uniform && m > 1) {
        // PAQ weighting really deviates from 1/H here (head 0 is dispersed).
        EXPECT_GT(ref.head_weight_spread_, 0.05);
      }
      if (flat && m > 2) {
        // Every pruned layer sees the same count (where the pyramid's differ), and the average
        // is the pyramid's up to rounding that count.
        EXPECT_EQ(per_layer[plan->groups[1].first_layer], per_layer.back());
        EXPECT_NE(pyramid->groups[1].visual_tokens, pyramid->groups[m - 1].visual_tokens);
        const int n0 = plan->groups[0].n_layers, L = dims.n_layers;
        EXPECT_LE(std::abs(plan->average_visual_tokens - pyramid->average_visual_tokens),
                  0.5 * (L - n0) / L);
      }
    }
  }
}

TEST(HapMethod, PaqWeightingChangesTheKeptSet) {
  const ModelDims dims = SmallDims();
  absl::StatusOr<Plan> plan = PlanForGroups(dims, 8);
  ASSERT_TRUE(plan.ok());
  std::vector<std::vector<int>> first_group;
  for (bool uniform : {false, true}) {
    HapPruner pruner(*plan, dims,
                     uniform ? HapPruner::Weighting::kUniform : HapPruner::Weighting::kPaqSoftmax);
    testref::Sim sim(Spec(42));
    HapReference ref(dims.n_layers, dims.n_visual_tokens, 8, uniform);
    sim.Run(pruner, [&](const LayerView& v, const Pruner& p) { return ref(v, p); });
    ASSERT_FALSE(ref.group_kept_.empty());
    first_group.push_back(ref.group_kept_[0]);
  }
  EXPECT_NE(first_group[0], first_group[1]);
}

// A low PAQ-softmax temperature concentrates the head weights and changes what HAP keeps (so
// the τ = 0.05 rows of KeptSetsMatchDirectRecomputation test something τ = 1 does not).
TEST(HapMethod, LowTemperatureConcentratesWeightsAndChangesTheKeptSet) {
  const ModelDims dims = SmallDims();
  absl::StatusOr<Plan> plan = PlanForGroups(dims, 8);
  ASSERT_TRUE(plan.ok());
  std::vector<std::vector<std::vector<int>>> kept;
  std::vector<double> spread;
  for (double tau : {1.0, 0.05}) {
    HapPruner pruner(*plan, dims, HapPruner::Weighting::kPaqSoftmax, tau);
    testref::Sim sim(Spec(42));
    HapReference ref(dims.n_layers, dims.n_visual_tokens, 8, false, false, tau);
    sim.Run(pruner, [&](const LayerView& v, const Pruner& p) { return ref(v, p); });
    ASSERT_FALSE(ref.group_kept_.empty());
    kept.push_back(ref.group_kept_);
    spread.push_back(ref.head_weight_spread_);
  }
  EXPECT_NE(kept[0], kept[1]);
  EXPECT_GT(spread[1], spread[0]);
}

TEST(HapMethod, MakePrunerChecksThePaqTemperature) {
  const ModelDims dims = SmallDims();
  PruneRequest req;
  req.retain = dims.n_visual_tokens / 4.0;
  for (const char* m : {"hap", "hap-flat"}) {
    req.method = m;
    for (double tau : {0.01, 0.05, 1.0, 100.0}) {
      req.paq_temperature = tau;
      absl::StatusOr<std::unique_ptr<Pruner>> p = MakePruner(req, dims);
      ASSERT_TRUE(p.ok()) << m << " " << tau << ": " << p.status();
      EXPECT_EQ((*p)->stats().paq_temperature, tau);
    }
    for (double tau : {0.0, 0.009, -1.0, 100.5, double(NAN), double(INFINITY)}) {
      req.paq_temperature = tau;
      const absl::Status s = MakePruner(req, dims).status();
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << m << " " << tau;
      EXPECT_NE(s.message().find("paq_temperature"), std::string::npos) << s.message();
      EXPECT_NE(s.message().find("[0.01, 100]"), std::string::npos) << s.message();
    }
  }
  // Methods without PAQ-softmax take only the default.
  for (const std::string& m : PruneMethods()) {
    if (m == "hap" || m == "hap-flat") continue;
    req.method = m;
    req.paq_temperature = 1.0;
    EXPECT_TRUE(MakePruner(req, dims).ok()) << m;
    req.paq_temperature = 0.5;
    const absl::Status s = MakePruner(req, dims).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << m;
    EXPECT_NE(s.message().find("only 'hap' and 'hap-flat'"), std::string::npos) << s.message();
  }
}

TEST(HapMethod, QueryDependentHeadGetsTheLargerWeight) {
  // One layer, two heads, 4 visual tokens, 2 text rows. Head 0: both text queries are zero →
  // uniform (dispersed). Head 1: text row j points at visual key j → query-dependent.
  const ModelDims d{
      .n_layers = 2, .n_heads = 2, .n_kv_heads = 2, .head_dim = 4, .n_visual_tokens = 4};
  absl::StatusOr<Plan> plan = PlanForGroups(d, 2);
  ASSERT_TRUE(plan.ok());
  HapPruner pruner(*plan, d, HapPruner::Weighting::kPaqSoftmax);
  const int n = 1 + 4 + 2;  // BOS, 4 visual, 2 text
  std::vector<float> q(n * 8, 0.f), k(n * 8, 0.f), lse(2 * n, 0.f);
  for (int v = 0; v < 4; ++v) {
    k[(1 + v) * 8 + 0 + v] = 1.f;  // head 0 keys
    k[(1 + v) * 8 + 4 + v] = 1.f;  // head 1 keys: one-hot per token
  }
  q[5 * 8 + 4 + 0] = 20.f;  // text row 0, head 1 → visual 0
  q[6 * 8 + 4 + 2] = 20.f;  // text row 1, head 1 → visual 2
  const LayerAttention att = HandLayer(d, n, 1.f, q, k, lse, 1, 4);  // lse unused: HAP renormalises
  auto got = pruner.AfterLayer(att);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());            // group 0 = layer 0 ends → keep N_v(1) = 1
  EXPECT_EQ(**got, std::vector<int>({0}));  // tie between 0 and 2 → lower index
  const HapLayerExplain& x = pruner.stats().hap_layers.at(0);
  EXPECT_NEAR(x.head_paq[0], 0.0, 1e-6);
  EXPECT_GT(x.head_paq[1], 0.99);
  EXPECT_GT(x.head_weights[1], x.head_weights[0]);
  EXPECT_NEAR(x.head_weights[1], 1 / (1 + std::exp(-x.head_paq[1])), 1e-6);
}

// FastV / PDrop scores: head-mean of the last prompt token's raw attention.
std::vector<double> LastTokenScores(const LayerView& v) {
  std::vector<double> s(v.n_vis, 0.0);
  for (const auto& ph : v.p)
    for (int i = 0; i < v.n_vis; ++i) s[i] += ph[v.n_tokens - 1][v.vis_begin + i] / v.p.size();
  return s;
}

TEST(FastvMethod, KeptSetMatchesDirectRecomputation) {
  const ModelDims dims = SmallDims();
  for (double target : {48.0, 36.0, 20.0}) {
    SCOPED_TRACE(target);
    absl::StatusOr<StageSchedule> s = FastvSchedule(dims, target);
    ASSERT_TRUE(s.ok());
    LastTokenPruner pruner("fastv", dims, *s);
    // keep = round((L·t − K·V)/(L − K)) with K = 2, at the end of layer 1.
    const int keep = static_cast<int>(std::round((32 * target - 2 * 144) / 30.0));
    testref::Sim sim(Spec(7));
    int pruned = 0;
    const auto per_layer =
        sim.Run(pruner, [&](const LayerView& v, const Pruner&) -> std::optional<RefPrune> {
          if (v.layer != 1) return std::nullopt;
          ++pruned;
          return RefPrune{LastTokenScores(v), keep};
        });
    EXPECT_EQ(pruned, 1);
    EXPECT_EQ(per_layer[1], 144);
    EXPECT_EQ(per_layer[2], keep);
    EXPECT_NEAR(pruner.stats().achieved_average_visual_tokens(), (2 * 144 + 30.0 * keep) / 32,
                1e-12);
  }
}

TEST(FastvMethod, ScheduleClampsAndHandlesFullBudget) {
  const ModelDims d = ModelDims::Llava15_7B();
  absl::StatusOr<StageSchedule> s = FastvSchedule(d, 64);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->after_layer, std::vector<int>({1}));
  EXPECT_EQ(s->keep, std::vector<int>({30}));  // round((2048 − 1152)/30) = round(29.87)
  s = FastvSchedule(d, 10);                    // below 2V/L = 36: floor of 1 token
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->keep, std::vector<int>({1}));
  EXPECT_NEAR(s->Average(32, 576), (2 * 576 + 30) / 32.0, 1e-12);
  s = FastvSchedule(d, 576);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->keep.empty());
}

// λ for PDrop solved here by a dense scan refined by secant steps (not the pruner's bisection).
double SolveLambda(double target, int V) {
  auto avg = [&](double l) { return V / 32.0 * (2 + 6 * l + 8 * l * l + 16 * l * l * l); };
  double a = 0, b = 1;
  for (int i = 0; i <= 1000; ++i) {
    if (avg(i / 1000.0) >= target) {
      b = i / 1000.0;
      a = b - 0.001;
      break;
    }
  }
  for (int it = 0; it < 60 && b - a > 1e-15; ++it) {
    const double fa = avg(a) - target, fb = avg(b) - target;
    const double c = b - fb * (b - a) / (fb - fa);
    (avg(c) < target ? a : b) = c;
    if (std::abs(avg(c) - target) < 1e-12) return c;
  }
  return b;
}

TEST(PdropMethod, KeptSetsMatchDirectRecomputation) {
  const ModelDims dims = SmallDims();
  const double target = 36;  // 25% of 144
  const double lambda = SolveLambda(target, 144);
  std::map<int, int> keep_after;  // boundaries [2, 8, 16] → prune after layers 1, 7, 15
  keep_after[1] = static_cast<int>(std::round(144 * lambda));
  keep_after[7] = static_cast<int>(std::round(144 * lambda * lambda));
  keep_after[15] = static_cast<int>(std::round(144 * lambda * lambda * lambda));
  double got_lambda = 0;
  absl::StatusOr<StageSchedule> s = PdropSchedule(dims, target, &got_lambda);
  ASSERT_TRUE(s.ok());
  EXPECT_NEAR(got_lambda, lambda, 1e-9);
  LastTokenPruner pruner("pdrop", dims, *s);
  testref::Sim sim(Spec(9));
  int pruned = 0;
  const auto per_layer =
      sim.Run(pruner, [&](const LayerView& v, const Pruner&) -> std::optional<RefPrune> {
        if (!keep_after.count(v.layer)) return std::nullopt;
        ++pruned;
        return RefPrune{LastTokenScores(v), keep_after[v.layer]};
      });
  EXPECT_EQ(pruned, 3);
  EXPECT_EQ(per_layer[2], keep_after[1]);
  EXPECT_EQ(per_layer[8], keep_after[7]);
  EXPECT_EQ(per_layer[16], keep_after[15]);
  EXPECT_EQ(per_layer[31], keep_after[15]);
  // Rounding the counts moves the average by well under a token.
  EXPECT_NEAR(pruner.stats().achieved_average_visual_tokens(), target, 0.5);
}

TEST(PdropMethod, DefaultScheduleAndTargets) {
  const ModelDims d = ModelDims::Llava15_7B();
  absl::StatusOr<StageSchedule> s = PdropScheduleFor(d, {8, 16, 24}, 0.5);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->after_layer, std::vector<int>({7, 15, 23}));
  EXPECT_EQ(s->keep, std::vector<int>({288, 144, 72}));
  EXPECT_DOUBLE_EQ(s->Average(32, 576), 270.0);
  for (double t : {192.0, 128.0, 64.0}) {
    s = PdropSchedule(d, t);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->after_layer, std::vector<int>({1, 7, 15}));
    EXPECT_NEAR(s->Average(32, 576), t, 0.5) << t;
  }
}

// SparseVLM raters from the embeddings, straight from docs/design.md §4.
std::vector<int> Raters(const testref::Sim& sim, const testref::SimSpec& spec) {
  const int V = spec.dims.n_visual_tokens, tb = spec.prefix + V, d = spec.d_embed;
  const auto& e = sim.embeddings();
  std::vector<double> score(spec.text, 0.0);
  for (int v = 0; v < V; ++v) {
    std::vector<double> l(spec.text);
    double z = 0;
    for (int t = 0; t < spec.text; ++t) {
      double s = 0;
      for (int c = 0; c < d; ++c) s += double(e[(spec.prefix + v) * d + c]) * e[(tb + t) * d + c];
      l[t] = s;
    }
    const double mx = *std::max_element(l.begin(), l.end());
    for (double& x : l) z += (x = std::exp(x - mx));
    for (int t = 0; t < spec.text; ++t) score[t] += l[t] / z / V;
  }
  double mean = 0;
  for (double s : score) mean += s / spec.text;
  std::vector<int> raters;
  for (int t = 0; t < spec.text; ++t)
    if (score[t] > mean) raters.push_back(t);
  return raters;
}

TEST(SparseVlmMethod, KeptSetsMatchDirectRecomputation) {
  const ModelDims dims = SmallDims();
  // 128 of 576 scaled to V = 144 → the 128 schedule [238, 108, 60] · 144/576.
  absl::StatusOr<StageSchedule> s = SparseVlmSchedule(dims, 32);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->after_layer, std::vector<int>({1, 5, 14}));
  EXPECT_EQ(s->keep, std::vector<int>({60, 27, 15}));  // 59.5 → 60, 27, 15
  const testref::SimSpec spec = Spec(13);
  testref::Sim sim(spec);
  SparseVlmPruner pruner(dims, *s);
  ASSERT_TRUE(pruner.Begin(sim.Input()).ok());
  const std::vector<int> raters = Raters(sim, spec);
  ASSERT_FALSE(raters.empty());
  ASSERT_LT(raters.size(), size_t(spec.text));  // a real subset, so the selection matters
  EXPECT_EQ(pruner.raters(), raters);
  std::map<int, int> keep_after = {{1, 60}, {5, 27}, {14, 15}};
  int pruned = 0;
  sim.Run(pruner, [&](const LayerView& v, const Pruner&) -> std::optional<RefPrune> {
    if (!keep_after.count(v.layer)) return std::nullopt;
    ++pruned;
    RefPrune r{std::vector<double>(v.n_vis, 0.0), keep_after[v.layer]};
    for (const auto& ph : v.p)
      for (int t : raters)
        for (int i = 0; i < v.n_vis; ++i)
          r.scores[i] += ph[v.text_begin + t][v.vis_begin + i] / (v.p.size() * raters.size());
    return r;
  });
  EXPECT_EQ(pruned, 3);
  EXPECT_NEAR(pruner.stats().achieved_average_visual_tokens(),
              (2 * 144 + 4 * 60 + 9 * 27 + 17 * 15) / 32.0, 1e-12);
}

TEST(SparseVlmMethod, PaperSchedulesAndInterpolation) {
  const ModelDims d = ModelDims::Llava15_7B();
  struct Row {
    double target;
    std::vector<int> keep;
    double average;
  };
  for (const Row& r : {Row{192, {300, 200, 118}, 6158 / 32.0}, Row{128, {238, 108, 60}, 128.0},
                       Row{64, {66, 34, 20}, 2062 / 32.0}, Row{160, {269, 154, 89}, 0}}) {
    absl::StatusOr<StageSchedule> s = SparseVlmSchedule(d, r.target);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->after_layer, std::vector<int>({1, 5, 14}));
    EXPECT_EQ(s->keep, r.keep) << r.target;
    if (r.average > 0) {
      EXPECT_DOUBLE_EQ(s->Average(32, 576), r.average);
    }
  }
  // Below the 64 anchor: the 64 schedule scaled to the target average.
  absl::StatusOr<StageSchedule> s = SparseVlmSchedule(d, 48);
  ASSERT_TRUE(s.ok());
  EXPECT_NEAR(s->Average(32, 576), 48, 0.6);
  EXPECT_TRUE(SparseVlmSchedule(d, 576)->keep.empty());
}

TEST(SparseVlmMethod, NeedsBegin) {
  const ModelDims dims = SmallDims();
  absl::StatusOr<StageSchedule> s = SparseVlmSchedule(dims, 32);
  ASSERT_TRUE(s.ok());
  SparseVlmPruner pruner(dims, *s);
  testref::Sim sim(Spec(13));
  // Without Begin the first pruning layer fails instead of guessing raters.
  std::vector<float> q(size_t(sim.total_tokens()) * 32), k(size_t(sim.total_tokens()) * 16),
      lse(size_t(4) * sim.total_tokens());
  LayerAttention att = HandLayer(dims, sim.total_tokens(), 0.35f, q, k, lse, 5, 144);
  ASSERT_TRUE(pruner.AfterLayer(att).ok());
  att.layer = 1;
  EXPECT_EQ(pruner.AfterLayer(att).status().code(), absl::StatusCode::kFailedPrecondition);
}

// DART straight from its definition (dart_pruner.h), by full sorts: pivots = the 4 visual and
// the 4 query-text rows with the largest ‖key‖₁ (all KV heads); each pivot in turn (visual by
// norm, then text by norm) takes its share of keep − |visual pivots| among the visual tokens not
// yet taken, lowest cosine of the hidden states first; ties → lower index.
struct DartRef {
  std::vector<int> kept, visual_pivots, text_pivots;
};

DartRef DartDirect(const LayerView& v, int keep, int kv_dim) {
  const int n_text = v.n_tokens - v.text_begin;
  auto norm1 = [&](int row) {
    double s = 0;
    for (int c = 0; c < kv_dim; ++c) s += std::fabs(double(v.k[size_t(row) * kv_dim + c]));
    return s;
  };
  auto by_norm = [&](int first_row, int n, int count) {
    std::vector<std::pair<double, int>> x;
    for (int i = 0; i < n; ++i) x.push_back({-norm1(first_row + i), i});
    std::sort(x.begin(), x.end());
    std::vector<int> out;
    for (int i = 0; i < std::min(count, n); ++i) out.push_back(x[i].second);
    return out;
  };
  DartRef r;
  r.visual_pivots = by_norm(v.vis_begin, v.n_vis, std::min(4, keep));
  r.text_pivots = by_norm(v.text_begin, n_text, 4);
  auto cosine = [&](int row_a, int row_b) {
    double ab = 0, aa = 0, bb = 0;
    for (int c = 0; c < v.d_hidden; ++c) {
      const double a = v.hidden[size_t(row_a) * v.d_hidden + c];
      const double b = v.hidden[size_t(row_b) * v.d_hidden + c];
      ab += a * b;
      aa += a * a;
      bb += b * b;
    }
    return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0.0;
  };
  std::vector<int> pivot_rows;
  for (int p : r.visual_pivots) pivot_rows.push_back(v.vis_begin + p);
  for (int p : r.text_pivots) pivot_rows.push_back(v.text_begin + p);
  std::set<int> kept(r.visual_pivots.begin(), r.visual_pivots.end());
  const int rest = keep - static_cast<int>(r.visual_pivots.size());
  const int np = static_cast<int>(pivot_rows.size());
  for (int i = 0; i < np && rest > 0; ++i) {
    const int share = rest / np + (i < rest % np ? 1 : 0);
    std::vector<std::pair<double, int>> cand;
    for (int t = 0; t < v.n_vis; ++t) {
      if (!kept.count(t)) cand.push_back({cosine(pivot_rows[i], v.vis_begin + t), t});
    }
    std::sort(cand.begin(), cand.end());
    for (int j = 0; j < share; ++j) kept.insert(cand[j].second);
  }
  r.kept.assign(kept.begin(), kept.end());
  return r;
}

TEST(DartMethod, KeptSetsMatchDirectRecomputation) {
  const ModelDims dims = SmallDims();
  const int kv_dim = dims.n_kv_heads * dims.head_dim;
  // keep = round((32·t − 2·144) / 30): 1 (the minimum, 9.9375), 4 (pivots only), 5, 12 (one
  // per pivot), 29 and 42 (uneven shares); with 7 and with 2 query-text tokens.
  for (int text : {7, 2}) {
    for (double target : {9.9375, 12.5, 14.0, 20.0, 36.0, 48.0}) {
      SCOPED_TRACE(testing::Message() << "target " << target << ", " << text << " text tokens");
      absl::StatusOr<StageSchedule> s = DartSchedule(dims, target);
      ASSERT_TRUE(s.ok()) << s.status();
      const int keep = static_cast<int>(std::lround((32 * target - 2 * 144) / 30.0));
      ASSERT_EQ(s->after_layer, std::vector<int>({1}));
      ASSERT_EQ(s->keep, std::vector<int>({keep}));
      DartPruner pruner(dims, *s);
      testref::SimSpec spec = Spec(17);
      spec.text = text;
      testref::Sim sim(spec);
      int pruned = 0;
      DartRef want;
      const auto per_layer =
          sim.Run(pruner, [&](const LayerView& v, const Pruner&) -> std::optional<RefPrune> {
            if (v.layer != 1) return std::nullopt;
            ++pruned;
            want = DartDirect(v, keep, kv_dim);
            // The harness compares sets: score the reference's kept tokens 1, the rest 0.
            RefPrune r{std::vector<double>(v.n_vis, 0.0), keep};
            for (int i : want.kept) r.scores[i] = 1.0;
            return r;
          });
      EXPECT_EQ(pruned, 1);
      EXPECT_EQ(pruner.visual_pivots(), want.visual_pivots);
      EXPECT_EQ(pruner.text_pivots(), want.text_pivots);
      EXPECT_EQ(static_cast<int>(pruner.text_pivots().size()), std::min(4, text));
      EXPECT_EQ(per_layer[1], 144);
      EXPECT_EQ(per_layer[2], keep);
      EXPECT_EQ(pruner.stats().method, "dart");
      EXPECT_NEAR(pruner.stats().achieved_average_visual_tokens(), (2 * 144 + 30.0 * keep) / 32,
                  1e-12);
    }
  }
}

TEST(DartMethod, DuplicatesOfAPivotAreDropped) {
  // One layer, one head, 10 visual tokens and 1 text token, keep 6. Keys: tokens 3, 6, 7, 8 have
  // the largest norms (9, 8, 7, 6; the rest 1) and are the visual pivots, in that order; the
  // text token is the text pivot. The 2 tokens left to choose go to the first two pivots, one
  // each. Hidden states: 3 = (1,0,0), 6 = (0,1,0), 7 = 8 = (0,0,1); token 0 duplicates 3,
  // 1 = −3, 2 = −6, 4 = (1,1,0), 5 = (0,0,1), 9 = (−1,−1,0). Pivot 3 takes token 1 (cosine −1),
  // pivot 6 then token 2 (cosine −1); 3's duplicate 0 is dropped.
  const ModelDims d{
      .n_layers = 2, .n_heads = 1, .n_kv_heads = 1, .head_dim = 2, .n_visual_tokens = 10};
  StageSchedule s;
  s.after_layer = {0};
  s.keep = {6};
  DartPruner pruner(d, s);
  const int n = 1 + 10 + 1, D = 3;
  std::vector<float> q(n * 2, 0.f), k(n * 2, 0.f), lse(n, 0.f), h(n * D, 0.f);
  for (int v = 0; v < 10; ++v) k[(1 + v) * 2 + 1] = 1.f;
  k[(1 + 3) * 2 + 1] = 9.f;
  k[(1 + 6) * 2 + 1] = -8.f;  // the L1 norm: the sign does not matter
  k[(1 + 7) * 2 + 1] = 7.f;
  k[(1 + 8) * 2 + 1] = 6.f;
  k[11 * 2] = 1.f;
  const float dirs[10][3] = {{2, 0, 0}, {-1, 0, 0}, {0, -1, 0}, {1, 0, 0}, {1, 1, 0},
                             {0, 0, 1}, {0, 1, 0},  {0, 0, 1},  {0, 0, 1}, {-1, -1, 0}};
  for (int v = 0; v < 10; ++v) std::copy_n(dirs[v], 3, h.begin() + (1 + v) * D);
  h[11 * D] = 1.f;
  LayerAttention att = HandLayer(d, n, 1.f, q, k, lse, 1, 10);
  att.hidden = h.data();
  att.d_model = D;
  auto got = pruner.AfterLayer(att);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, std::vector<int>({1, 2, 3, 6, 7, 8}));
  EXPECT_EQ(pruner.visual_pivots(), std::vector<int>({3, 6, 7, 8}));
  EXPECT_EQ(pruner.text_pivots(), std::vector<int>({0}));
  // Without hidden states DART cannot measure duplication.
  DartPruner blind(d, s);
  att.hidden = nullptr;
  EXPECT_EQ(blind.AfterLayer(att).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(DartMethod, ScheduleAndMinimum) {
  const ModelDims d = ModelDims::Llava15_7B();
  absl::StatusOr<StageSchedule> s = DartSchedule(d, 64);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->after_layer, std::vector<int>({1}));  // layers 0 and 1 see all 576
  EXPECT_EQ(s->keep, std::vector<int>({30}));        // round((2048 − 1152) / 30) = round(29.87)
  s = DartSchedule(d, 192);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->keep, std::vector<int>({166}));  // round((6144 − 1152) / 30) = round(166.4)
  // Minimum (2·576 + 30·1) / 32 = 36.9375: reachable exactly, not below.
  s = DartSchedule(d, 36.9375);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->keep, std::vector<int>({1}));
  s = DartSchedule(d, 32);  // the paper's lowest setting, as an average per layer
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.status().message()).find("36.94"), std::string::npos) << s.status();
  EXPECT_TRUE(DartSchedule(d, 576)->keep.empty());
  EXPECT_TRUE(DartSchedule(d, 600)->keep.empty());
  EXPECT_EQ(DartSchedule(d, 0).status().code(), absl::StatusCode::kInvalidArgument);
  // K scales with depth: 2 of 32 layers, 1 of 4 or 8 (at least one unpruned layer).
  EXPECT_EQ(DartFullLayers(32), 2);
  EXPECT_EQ(DartFullLayers(8), 1);
  EXPECT_EQ(DartFullLayers(4), 1);
  EXPECT_EQ(DartFullLayers(64), 4);
}

TEST(RandomMethod, SeededSubsetsAtHapSchedule) {
  const ModelDims dims = SmallDims();
  absl::StatusOr<Plan> plan = PlanForGroups(dims, 8);
  ASSERT_TRUE(plan.ok());
  auto run = [&](uint64_t seed) {
    RandomPruner pruner(*plan, dims, seed);
    testref::Sim sim(Spec(3));
    std::vector<std::vector<int>> kept;
    sim.Run(pruner, [&](const LayerView& v, const Pruner& p) -> std::optional<RefPrune> {
      const int g = plan->GroupOfLayer(v.layer);
      if (g == plan->M - 1 || v.layer != plan->groups[g].last_layer()) return std::nullopt;
      // Any subset of the right size is valid: accept exactly the one returned (checked for
      // size, order and duplicates by the harness) by scoring it 1 and the rest 0.
      const std::vector<int>& now = p.stats().kept_original;
      RefPrune r{std::vector<double>(v.n_vis, 0.0), plan->groups[g + 1].visual_tokens};
      for (int i = 0; i < v.n_vis; ++i)
        r.scores[i] = std::binary_search(now.begin(), now.end(), v.present[i]) ? 1.0 : 0.0;
      kept.push_back(now);
      return r;
    });
    EXPECT_EQ(pruner.stats().layer_tokens, plan->layer_visual_tokens);
    return kept;
  };
  const auto a = run(1), b = run(1), c = run(2);
  EXPECT_EQ(a.size(), 7u);
  EXPECT_EQ(a, b);  // same seed, same subsets
  EXPECT_NE(a, c);
}

TEST(RandomMethod, SubsetIsUniform) {
  // Each of 12 items kept with probability 4/12 over 6000 draws: ±5σ ≈ ±0.03.
  uint64_t state = 99;
  std::vector<int> count(12, 0);
  for (int t = 0; t < 6000; ++t) {
    const std::vector<int> s = RandomSubset(12, 4, &state);
    ASSERT_EQ(s.size(), 4u);
    ASSERT_TRUE(std::is_sorted(s.begin(), s.end()));
    ASSERT_EQ(std::set<int>(s.begin(), s.end()).size(), 4u);
    for (int i : s) ++count[i];
  }
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(count[i] / 6000.0, 1.0 / 3, 0.03) << i;
}

TEST(Factory, MethodsAndBudgets) {
  const ModelDims d = ModelDims::Llava15_7B();
  struct Row {
    std::string method;
    double planned_average;
  };
  for (const Row& r :
       {Row{"hap", 57.0625}, Row{"uniform", 57.0625}, Row{"random", 57.0625},
        Row{"fastv", (2 * 576 + 30 * 30) / 32.0}, Row{"sparsevlm", 2062 / 32.0},
        Row{"visionzip", 64.0}, Row{"none", 576.0},
        // HAP's 16 groups with groups 1..15 at round(22.47) = 22 tokens.
        Row{"hap-flat", (2 * 576 + 30 * 22) / 32.0},
        Row{"uniform-flat", (2 * 576 + 30 * 22) / 32.0}, Row{"dart", (2 * 576 + 30 * 30) / 32.0},
        // Before the LLM: every layer sees the 64 kept tokens.
        Row{"divprune", 64.0}, Row{"cdpruner-llm", 64.0}}) {
    PruneRequest req;
    req.method = r.method;
    req.retain = 64;
    auto p = MakePruner(req, d);
    ASSERT_TRUE(p.ok()) << r.method << ": " << p.status();
    EXPECT_EQ((*p)->stats().method, r.method);
    EXPECT_DOUBLE_EQ((*p)->stats().planned_average_visual_tokens, r.planned_average) << r.method;
  }
  PruneRequest pd;
  pd.method = "pdrop";
  pd.retain = 64;
  auto p = MakePruner(pd, d);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR((*p)->stats().planned_average_visual_tokens, 64, 0.5);

  // A FLOPs budget gives the baselines HAP's average for it.
  PruneRequest fl;
  fl.method = "fastv";
  fl.flops = 0.2;
  absl::StatusOr<double> t = TargetAverageTokens(fl, d);
  ASSERT_TRUE(t.ok());
  absl::StatusOr<Plan> plan = MakePlan(d, Budget::Flops(0.2), kDefaultTextTokens);
  ASSERT_TRUE(plan.ok());
  EXPECT_DOUBLE_EQ(*t, plan->average_visual_tokens);

  auto counts = VisionZipCountsFor(PruneRequest{"visionzip", 192.0, std::nullopt, 0}, d);
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->dominant, 162);
  EXPECT_EQ(counts->contextual, 30);
}

TEST(Factory, Errors) {
  const ModelDims d = ModelDims::Llava15_7B();
  PruneRequest r;
  r.method = "fastest";
  r.retain = 64;
  auto p = MakePruner(r, d);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(p.status().message())
                .find("none, hap, uniform, fastv, pdrop, sparsevlm, visionzip, random"),
            std::string::npos)
      << p.status();
  r.method = "hap";
  r.flops = 0.5;  // both budgets
  EXPECT_EQ(MakePruner(r, d).status().code(), absl::StatusCode::kInvalidArgument);
  r.retain.reset();
  r.flops.reset();  // neither
  EXPECT_EQ(MakePruner(r, d).status().code(), absl::StatusCode::kInvalidArgument);
  r.retain = 0;
  EXPECT_EQ(MakePruner(r, d).status().code(), absl::StatusCode::kInvalidArgument);
  r.retain = 20;  // below HAP's minimum of 29.1
  p = MakePruner(r, d);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(p.status().message()).find("29.1"), std::string::npos);
  r.method = "hap-flat";  // the same groups as HAP, so the same minimum
  p = MakePruner(r, d);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(p.status().message()).find("29.1"), std::string::npos) << p.status();
  r.method = "dart";  // 2 layers at all 576 tokens, then 1: at least 36.94
  p = MakePruner(r, d);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(p.status().message()).find("36.94"), std::string::npos) << p.status();
  r.method = "fastv";  // clamps to one token instead
  EXPECT_TRUE(MakePruner(r, d).ok());
  r.method = "none";
  r.retain.reset();
  EXPECT_TRUE(MakePruner(r, d).ok());
}

TEST(PrunerBase, RejectsEngineMistakes) {
  const ModelDims dims = SmallDims();
  absl::StatusOr<Plan> plan = PlanForGroups(dims, 8);
  ASSERT_TRUE(plan.ok());
  HapPruner pruner(*plan, dims, HapPruner::Weighting::kPaqSoftmax);
  const int n = 5 + 144 + 7;
  std::vector<float> q(size_t(n) * 32, 0.1f), k(size_t(n) * 16, 0.1f), lse(size_t(4) * n, 0.f);
  LayerAttention att = HandLayer(dims, n, 0.35f, q, k, lse, 5, 100);  // the plan is for 144
  EXPECT_EQ(pruner.AfterLayer(att).status().code(), absl::StatusCode::kInvalidArgument);
  att.n_vis = 144;
  ASSERT_TRUE(pruner.AfterLayer(att).ok());
  att.layer = 2;  // skipped layer 1
  EXPECT_EQ(pruner.AfterLayer(att).status().code(), absl::StatusCode::kFailedPrecondition);
  // A request without an image: nothing to prune, no error.
  att.layer = 0;
  att.n_vis = 0;
  att.n_tokens = 12;
  for (int l = 0; l < 32; ++l) {
    att.layer = l;
    auto r = pruner.AfterLayer(att);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->has_value());
  }
}

// A method that decides in the backend's memory (the CPU's here) after layers 1 and 3, keeping
// every other token present, and on the host after layer 5 when asked to.
class KeepsInBackend final : public PrunerBase {
 public:
  KeepsInBackend(const ModelDims& dims, bool host_stage_after)
      : PrunerBase("test", dims, std::vector<int>(dims.n_layers, dims.n_visual_tokens)),
        host_stage_after_(host_stage_after) {}
  KeepResult AfterLayer(const LayerAttention& att) override {
    absl::StatusOr<bool> has_image = StartLayer(att);
    if (!has_image.ok()) return has_image.status();
    if (att.layer == 1 || att.layer == 3) {
      std::vector<int32_t>& kept = att.layer == 1 ? first_ : second_;
      kept.clear();
      for (int i = 0; i < att.n_vis; i += 2) kept.push_back(i);
      return CommitInBackend(att, kept.data(), static_cast<int>(kept.size()), 1.0);
    }
    if (att.layer == 5 && host_stage_after_) return Commit(att, {0}, 1.0);
    return std::optional<std::vector<int>>();
  }

 private:
  bool host_stage_after_;
  std::vector<int32_t> first_, second_;
};

// Stages decided in the backend's memory: the engine learns the count at once and the indices
// only in Finish, which completes each stage's record in order; a list the device marked (−1:
// a NaN score) or of the wrong length is an error there, and so is a host stage after them.
TEST(PrunerBase, CompletesStagesDecidedInTheBackendInFinish) {
  ModelDims dims = SmallDims();
  dims.n_layers = 6;
  dims.n_visual_tokens = 12;
  const int n = 5 + 12 + 7;
  std::vector<float> q(size_t(n) * 32, 0.1f), k(size_t(n) * 16, 0.1f), lse(size_t(4) * n, 0.f);
  auto run = [&](KeepsInBackend* p, std::vector<int>* counts) -> absl::Status {
    LayerAttention att = HandLayer(dims, n, 0.35f, q, k, lse, 5, 12);
    BackendKeep slot;
    att.backend_keep = &slot;
    for (int l = 0; l < dims.n_layers; ++l) {
      att.layer = l;
      att.n_tokens = 5 + att.n_vis + 7;
      slot = BackendKeep{};
      absl::StatusOr<std::optional<std::vector<int>>> r = p->AfterLayer(att);
      if (!r.ok()) return r.status();
      if (r->has_value()) {
        att.n_vis = static_cast<int>((*r)->size());
      } else if (slot.kept != nullptr) {
        att.n_vis = slot.count;
      }
      counts->push_back(att.n_vis);
    }
    return absl::OkStatus();
  };

  KeepsInBackend pruner(dims, false);
  std::vector<int> counts;
  ASSERT_TRUE(run(&pruner, &counts).ok());
  EXPECT_EQ(counts, (std::vector<int>{12, 6, 6, 3, 3, 3}));
  ASSERT_EQ(pruner.stats().stages.size(), 2u);
  EXPECT_TRUE(pruner.stats().stages[0].kept_original.empty());  // not known yet
  EXPECT_EQ(pruner.stats().stages[1].tokens_before, 6);
  // The lists as the engine copied them back (not what the method would pick: Finish takes
  // the device's word).
  ASSERT_TRUE(pruner.Finish({{0, 1, 3, 4, 5, 11}, {1, 2, 5}}).ok());
  EXPECT_EQ(pruner.stats().stages[0].kept_original, (std::vector<int>{0, 1, 3, 4, 5, 11}));
  EXPECT_EQ(pruner.stats().stages[1].kept_original, (std::vector<int>{1, 3, 11}));
  EXPECT_EQ(pruner.stats().kept_original, (std::vector<int>{1, 3, 11}));

  counts.clear();
  ASSERT_TRUE(run(&pruner, &counts).ok());  // a new request forgets the last one's stages
  absl::Status marked = pruner.Finish({{-1, -1, -1, -1, -1, -1}, {0, 1, 2}});
  EXPECT_EQ(marked.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(marked.message().find("NaN"), std::string::npos) << marked;
  counts.clear();
  ASSERT_TRUE(run(&pruner, &counts).ok());
  EXPECT_EQ(pruner.Finish({{0, 1, 2}, {0, 1, 2}}).code(), absl::StatusCode::kInternal);
  counts.clear();
  ASSERT_TRUE(run(&pruner, &counts).ok());
  EXPECT_EQ(pruner.Finish({{0, 2, 1, 3, 4, 5}, {0, 1, 2}}).code(),
            absl::StatusCode::kInvalidArgument);  // not ascending
  counts.clear();
  ASSERT_TRUE(run(&pruner, &counts).ok());
  EXPECT_EQ(pruner.Finish({}).code(), absl::StatusCode::kInternal);  // lists missing

  KeepsInBackend mixed(dims, true);
  counts.clear();
  EXPECT_EQ(run(&mixed, &counts).code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace hap
