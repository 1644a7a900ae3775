// The methods that choose their visual tokens before the LLM from the input embeddings —
// DivPrune and CDPruner-LLM — against slow direct recomputations (tests/prune/reference.h):
// DivPrune's max–min scores recomputed from the embeddings at every step, the conditional DPP's
// gains as ratios of determinants computed from scratch. Every pick must be the reference's best
// (ties: the lower index; a pick within 1e-9 of the best counts as a near-tie swap, reported),
// never a repeat. Also: relevance, budgets, the stage record, and the engine contract (Begin
// first, V as planned, no image).
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/prune/cdpruner_llm_pruner.h"
#include "runtime/prune/divprune_pruner.h"
#include "runtime/prune/factory.h"
#include "tests/prune/reference.h"

namespace hap {
namespace {

ModelDims Dims(int V) {
  return ModelDims{.n_layers = 6,
                   .d_model = 48,
                   .d_ffn = 128,
                   .n_heads = 4,
                   .n_kv_heads = 2,
                   .head_dim = 8,
                   .n_visual_tokens = V};
}

// A prompt [prefix][V visual][text] of random embeddings, F32 [n, d]. zero_row ≥ 0: that
// visual token's embedding is all zeros.
struct Prompt {
  int prefix = 3, V = 40, text = 7, d = 48;
  std::vector<float> rows;

  int n() const { return prefix + V + text; }
  PrefillInput Input() const {
    PrefillInput in;
    in.embeddings = rows.data();
    in.n_tokens = n();
    in.d_model = d;
    in.vis_begin = prefix;
    in.n_vis = V;
    in.n_layers = 6;
    return in;
  }
  // The visual rows alone, F32 [V, d], and the query text rows, F32 [text, d].
  std::vector<float> Visual() const {
    return {rows.begin() + size_t(prefix) * d, rows.begin() + size_t(prefix + V) * d};
  }
  std::vector<float> Text() const { return {rows.begin() + size_t(prefix + V) * d, rows.end()}; }
};

// A prompt written out by hand: one query-text token, rows F32 [prefix + V + 1, d].
Prompt HandPrompt(int prefix, int V, int d, std::vector<float> rows) {
  Prompt p;
  p.prefix = prefix;
  p.V = V;
  p.text = 1;
  p.d = d;
  p.rows = std::move(rows);
  return p;
}

Prompt RandomPrompt(uint64_t seed, int V, int d, int zero_row = -1) {
  Prompt p;
  p.V = V;
  p.d = d;
  p.rows = testref::RandomNormal(size_t(p.n()) * d, seed);
  // Visual tokens share a common direction (as projected image tokens do), so similarities
  // spread over a range instead of all being near 0.
  for (int v = 0; v < V; ++v)
    for (int c = 0; c < d; ++c) p.rows[size_t(p.prefix + v) * d + c] += c % 3 == 0 ? 1.5f : 0.f;
  if (zero_row >= 0) std::fill_n(p.rows.begin() + size_t(p.prefix + zero_row) * d, d, 0.f);
  return p;
}

// Checks an implementation's pick order step by step against reference scores of each prefix
// (score(picked so far) → F64 [V], larger is better, −inf for picked tokens). Returns the number
// of near-tie swaps (a pick other than the reference's lower-index best but within tol of it).
int ExpectGreedyOrder(const std::vector<int>& order, int V, int k,
                      const std::function<std::vector<double>(const std::vector<int>&)>& score,
                      double tol, const std::string& what) {
  EXPECT_EQ(static_cast<int>(order.size()), k) << what;
  std::vector<int> prefix;
  int swaps = 0;
  for (size_t t = 0; t < order.size(); ++t) {
    const int got = order[t];
    EXPECT_TRUE(got >= 0 && got < V) << what << " step " << t;
    if (got < 0 || got >= V) return swaps;
    EXPECT_EQ(std::count(prefix.begin(), prefix.end(), got), 0) << what << ": repeats " << got;
    const std::vector<double> s = score(prefix);
    const int best = static_cast<int>(std::max_element(s.begin(), s.end()) - s.begin());
    if (got != best) {
      ++swaps;
      EXPECT_LE(s[best] - s[got], tol)
          << what << " step " << t << ": picked " << got << " (score " << s[got]
          << "), the reference's best is " << best << " (score " << s[best] << ")";
    }
    prefix.push_back(got);
  }
  return swaps;
}

// The relevance straight from its definition (cdpruner_llm_pruner.h).
std::vector<double> ReferenceRelevance(const Prompt& p) {
  const std::vector<float> vis = p.Visual(), text = p.Text();
  std::vector<double> m(p.V, 0.0);
  for (int i = 0; i < p.V; ++i) {
    for (int t = 0; t < p.text; ++t) {
      m[i] += testref::Cosine(&vis[size_t(i) * p.d], &text[size_t(t) * p.d], p.d) / p.text;
    }
  }
  const double lo = *std::min_element(m.begin(), m.end());
  const double hi = *std::max_element(m.begin(), m.end());
  for (double& x : m) x = hi - lo <= 1e-12 ? 1.0 : (x - lo + 1e-6) / (hi - lo);
  return m;
}

LayerAttention Layer(const ModelDims& d, int layer, int n_tokens, int vis_begin, int n_vis) {
  LayerAttention att;
  att.layer = layer;
  att.n_tokens = n_tokens;
  att.n_heads = d.n_heads;
  att.n_kv_heads = d.n_kv_heads;
  att.head_dim = d.head_dim;
  att.scale = 0.35f;
  att.vis_begin = vis_begin;
  att.n_vis = n_vis;
  return att;
}

// Begin, then every layer as the engine would call it with the kept tokens; checks the record.
void RunAndCheckRecord(Pruner& pruner, const Prompt& p, const ModelDims& dims, int k,
                       const std::vector<int>& order) {
  auto kept = pruner.Begin(p.Input());
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE(kept->has_value());
  std::vector<int> want = order;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(**kept, want);
  for (int l = 0; l < dims.n_layers; ++l) {
    auto r = pruner.AfterLayer(Layer(dims, l, p.n() - p.V + k, p.prefix, k));
    ASSERT_TRUE(r.ok()) << "layer " << l << ": " << r.status();
    EXPECT_FALSE(r->has_value());
  }
  const PruneStats& st = pruner.stats();
  EXPECT_EQ(st.layer_tokens, std::vector<int>(dims.n_layers, k));
  EXPECT_DOUBLE_EQ(st.achieved_average_visual_tokens(), k);
  EXPECT_DOUBLE_EQ(st.planned_average_visual_tokens, k);
  ASSERT_EQ(st.stages.size(), 1u);
  EXPECT_EQ(st.stages[0].after_layer, PruneStage::kBeforeLlm);
  EXPECT_EQ(st.stages[0].tokens_before, p.V);
  EXPECT_EQ(st.stages[0].tokens_kept, k);
  EXPECT_EQ(st.stages[0].kept_original, want);
  EXPECT_EQ(st.kept_original, want);
}

TEST(DivPruneMethod, PicksMatchBruteForceMaxMin) {
  for (uint64_t seed : {1, 2, 3}) {
    // Seed 3 has a zero embedding: cosine 0 with every token, distance 1.
    const Prompt p = RandomPrompt(seed, 40, 24, seed == 3 ? 11 : -1);
    const ModelDims dims = Dims(p.V);
    const std::vector<float> vis = p.Visual();
    for (int k : {1, 2, 7, 20, 39}) {
      SCOPED_TRACE(testing::Message() << "seed " << seed << " K=" << k);
      DivPrunePruner pruner(dims, k);
      RunAndCheckRecord(pruner, p, dims, k, pruner.selection_order());
      const int swaps = ExpectGreedyOrder(
          pruner.selection_order(), p.V, k,
          [&](const std::vector<int>& picked) {
            return testref::MaxMinScores(vis, p.V, p.d, picked);
          },
          1e-9, "divprune");
      EXPECT_EQ(swaps, 0);
    }
  }
}

TEST(DivPruneMethod, FirstPickIsTheTokenFarthestFromItsNearestNeighbour) {
  // Three tight pairs and one loner: the loner is picked first, then one of each pair.
  const Prompt p = HandPrompt(0, 7, 3, {1, 0, 0, 1, .05f, 0, 0,  1,  0,  .05f,       1, 0,
                                        0, 0, 1, 0, .05f, 1, -1, -1, -1, /*text*/ 1, 1, 1});
  DivPrunePruner pruner(Dims(7), 4);
  ASSERT_TRUE(pruner.Begin(p.Input()).ok());
  ASSERT_EQ(pruner.selection_order().size(), 4u);
  EXPECT_EQ(pruner.selection_order()[0], 6);
  std::set<int> pairs;
  for (int t = 1; t < 4; ++t) pairs.insert(pruner.selection_order()[t] / 2);
  EXPECT_EQ(pairs, std::set<int>({0, 1, 2}));
}

TEST(DivPruneMethod, TiesGoToTheLowerIndex) {
  // e0 = e2 = x, e1 = e3 = y: every token's nearest neighbour is at distance 0 → pick 0; then
  // 1 and 3 tie at distance 1 → 1; then 2 and 3 both sit on a picked token → 2.
  const Prompt p = HandPrompt(1, 4, 2, {1, 1, /*visual*/ 1, 0, 0, 1, 1, 0, 0, 1, /*text*/ 1, 1});
  DivPrunePruner pruner(Dims(4), 3);
  auto kept = pruner.Begin(p.Input());
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(pruner.selection_order(), std::vector<int>({0, 1, 2}));
  EXPECT_EQ(**kept, std::vector<int>({0, 1, 2}));
}

TEST(CdPrunerLlmMethod, RelevanceIsTheNormalisedMeanCosineToTheQueryText) {
  const Prompt p = RandomPrompt(5, 40, 48);
  CdPrunerLlmPruner pruner(Dims(p.V), 10);
  ASSERT_TRUE(pruner.Begin(p.Input()).ok());
  const std::vector<double> want = ReferenceRelevance(p);
  ASSERT_EQ(pruner.relevance().size(), want.size());
  double lo = 1e300, hi = -1e300;
  for (int i = 0; i < p.V; ++i) {
    EXPECT_NEAR(pruner.relevance()[i], want[i], 1e-12) << i;
    lo = std::min(lo, pruner.relevance()[i]);
    hi = std::max(hi, pruner.relevance()[i]);
  }
  EXPECT_GT(lo, 0);  // the 1e-6 offset: the least relevant token keeps a non-zero kernel row
  EXPECT_NEAR(hi, 1.0, 1e-3);
}

TEST(CdPrunerLlmMethod, PicksMatchDeterminantGains) {
  for (uint64_t seed : {4, 5, 6}) {
    // d ≥ V: S has full rank, every step has a real gain. Seed 6 has a zero embedding (S_ii = 0:
    // never worth picking).
    const Prompt p = RandomPrompt(seed, 40, 48, seed == 6 ? 17 : -1);
    const ModelDims dims = Dims(p.V);
    const std::vector<float> vis = p.Visual();
    const std::vector<double> r = ReferenceRelevance(p);
    for (int k : {1, 3, 12, 25}) {
      SCOPED_TRACE(testing::Message() << "seed " << seed << " K=" << k);
      CdPrunerLlmPruner pruner(dims, k);
      RunAndCheckRecord(pruner, p, dims, k, pruner.selection_order());
      const std::vector<int>& order = pruner.selection_order();
      EXPECT_EQ(order[0], std::max_element(r.begin(), r.end()) - r.begin());  // L_ii = r_i²
      if (seed == 6) {
        EXPECT_EQ(std::count(order.begin(), order.end(), 17), 0);
      }
      const int swaps = ExpectGreedyOrder(
          order, p.V, k,
          [&](const std::vector<int>& picked) {
            // Gains relative to the best, so the tolerance is relative.
            std::vector<double> g = testref::DppGains(vis, p.V, p.d, r, picked);
            const double best = *std::max_element(g.begin(), g.end());
            for (double& x : g) x /= best;
            return g;
          },
          1e-9, "cdpruner-llm");
      EXPECT_EQ(swaps, 0);
    }
  }
}

TEST(CdPrunerLlmMethod, RelevanceChangesThePicks) {
  // The same image with two different questions: different relevance, different subsets.
  const Prompt a = RandomPrompt(8, 40, 48);
  Prompt b = a;
  const std::vector<float> other = testref::RandomNormal(size_t(b.text) * b.d, 99);
  std::copy(other.begin(), other.end(), b.rows.begin() + size_t(b.prefix + b.V) * b.d);
  CdPrunerLlmPruner pa(Dims(40), 10), pb(Dims(40), 10);
  auto ka = pa.Begin(a.Input()), kb = pb.Begin(b.Input());
  ASSERT_TRUE(ka.ok() && kb.ok());
  EXPECT_NE(**ka, **kb);
  // DivPrune ignores the question.
  DivPrunePruner da(Dims(40), 10), db(Dims(40), 10);
  EXPECT_EQ(**da.Begin(a.Input()), **db.Begin(b.Input()));
}

TEST(CdPrunerLlmMethod, EqualRelevanceIsAPlainDppWithTiesToTheLowerIndex) {
  // Orthonormal visual tokens, a text row at equal angle to all: r = 1, L = I, every gain is 1.
  const Prompt p =
      HandPrompt(0, 4, 4, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, /*text*/ 1, 1, 1, 1});
  CdPrunerLlmPruner pruner(Dims(4), 3);
  ASSERT_TRUE(pruner.Begin(p.Input()).ok());
  EXPECT_EQ(pruner.relevance(), std::vector<double>(4, 1.0));
  EXPECT_EQ(pruner.selection_order(), std::vector<int>({0, 1, 2}));
}

TEST(CdPrunerLlmMethod, BeyondTheRankOfSTheRestGoByRelevance) {
  // Five tokens in a plane (d = 2): after two picks every other token lies in their span (gain
  // 0), so picks 3 and 4 are the most relevant of the rest.
  Prompt p = HandPrompt(1, 5, 2, {0.3f, 0.7f});  // the prefix; the rest below
  const float pi = 3.14159265f;
  for (float deg : {10.f, 35.f, 70.f, 100.f, 150.f}) {
    p.rows.push_back(std::cos(deg * pi / 180));
    p.rows.push_back(std::sin(deg * pi / 180));
  }
  p.rows.push_back(std::cos(60 * pi / 180));  // query text at 60°
  p.rows.push_back(std::sin(60 * pi / 180));
  CdPrunerLlmPruner pruner(Dims(5), 4);
  ASSERT_TRUE(pruner.Begin(p.Input()).ok());
  const std::vector<int>& order = pruner.selection_order();
  ASSERT_EQ(order.size(), 4u);
  const std::vector<float> vis = p.Visual();
  const std::vector<double>& r = pruner.relevance();
  // The first two picks are the DPP's.
  std::vector<int> prefix;
  for (int t = 0; t < 2; ++t) {
    const std::vector<double> g = testref::DppGains(vis, 5, 2, r, prefix);
    EXPECT_EQ(order[t], std::max_element(g.begin(), g.end()) - g.begin()) << t;
    prefix.push_back(order[t]);
  }
  // Then no token adds anything, and the rest follow r.
  const std::vector<double> g = testref::DppGains(vis, 5, 2, r, prefix);
  for (int i = 0; i < 5; ++i) {
    if (std::count(prefix.begin(), prefix.end(), i) == 0) {
      EXPECT_LT(std::fabs(g[i]), 1e-9) << i;
    }
  }
  std::vector<int> rest;
  for (int i = 0; i < 5; ++i)
    if (std::count(prefix.begin(), prefix.end(), i) == 0) rest.push_back(i);
  std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) { return r[a] > r[b]; });
  EXPECT_EQ(order[2], rest[0]);
  EXPECT_EQ(order[3], rest[1]);
}

TEST(PreLlmMethods, BudgetsFromTheFactory) {
  const ModelDims d = ModelDims::Llava15_7B();  // V = 576
  for (const std::string method : {"divprune", "cdpruner-llm"}) {
    SCOPED_TRACE(method);
    struct Row {
      double retain;
      int keep;
    };
    for (const Row& r : {Row{64, 64}, Row{16.4, 16}, Row{16.5, 17}, Row{0.5, 1}, Row{576, 576}}) {
      PruneRequest req;
      req.method = method;
      req.retain = r.retain;
      auto p = MakePruner(req, d);
      ASSERT_TRUE(p.ok()) << r.retain << ": " << p.status();
      EXPECT_EQ((*p)->stats().method, method);
      EXPECT_EQ((*p)->stats().planned_layer_tokens, std::vector<int>(32, r.keep)) << r.retain;
      EXPECT_DOUBLE_EQ((*p)->stats().planned_average_visual_tokens, r.keep);
    }
    // A FLOPs budget: K = round(HAP's plan average for it), as for the other baselines.
    PruneRequest fl;
    fl.method = method;
    fl.flops = 0.2;
    const absl::StatusOr<double> target = TargetAverageTokens(fl, d);
    ASSERT_TRUE(target.ok());
    auto p = MakePruner(fl, d);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_DOUBLE_EQ((*p)->stats().planned_average_visual_tokens, std::round(*target));

    for (double bad : {0.4, 576.5, 1000.0}) {
      PruneRequest req;
      req.method = method;
      req.retain = bad;
      auto e = MakePruner(req, d);
      ASSERT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(std::string(e.status().message()).find(method), std::string::npos) << e.status();
    }
    PruneRequest none;
    none.method = method;  // no budget
    EXPECT_EQ(MakePruner(none, d).status().code(), absl::StatusCode::kInvalidArgument);
  }
  // Both are listed (and named in the unknown-method error).
  for (const char* m : {"divprune", "cdpruner-llm"}) {
    EXPECT_NE(std::find(PruneMethods().begin(), PruneMethods().end(), m), PruneMethods().end());
  }
}

TEST(PreLlmMethods, KeepAllAtFullBudget) {
  const Prompt p = RandomPrompt(2, 40, 24);
  const ModelDims dims = Dims(p.V);
  DivPrunePruner div(dims, 40);
  CdPrunerLlmPruner cdp(dims, 40);
  for (Pruner* pruner : std::vector<Pruner*>{&div, &cdp}) {
    auto kept = pruner->Begin(p.Input());
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_FALSE(kept->has_value());
    for (int l = 0; l < dims.n_layers; ++l) {
      ASSERT_TRUE(pruner->AfterLayer(Layer(dims, l, p.n(), p.prefix, p.V)).ok());
    }
    EXPECT_TRUE(pruner->stats().stages.empty());
    EXPECT_DOUBLE_EQ(pruner->stats().achieved_average_visual_tokens(), 40);
  }
}

TEST(PreLlmMethods, EngineContract) {
  const Prompt p = RandomPrompt(3, 40, 24);
  const ModelDims dims = Dims(p.V);
  std::vector<std::unique_ptr<Pruner>> pruners;
  pruners.push_back(std::make_unique<DivPrunePruner>(dims, 8));
  pruners.push_back(std::make_unique<CdPrunerLlmPruner>(dims, 8));
  for (auto& pruner : pruners) {
    SCOPED_TRACE(pruner->stats().method);
    // Layer 0 without Begin: an error, not a silently unpruned run.
    EXPECT_EQ(pruner->AfterLayer(Layer(dims, 0, p.n(), p.prefix, p.V)).status().code(),
              absl::StatusCode::kFailedPrecondition);
    // Layer 0 must see the kept tokens.
    ASSERT_TRUE(pruner->Begin(p.Input()).ok());
    EXPECT_EQ(pruner->AfterLayer(Layer(dims, 0, p.n(), p.prefix, p.V)).status().code(),
              absl::StatusCode::kFailedPrecondition);
    // V other than planned.
    PrefillInput in = p.Input();
    in.n_vis = 39;
    EXPECT_EQ(pruner->Begin(in).status().code(), absl::StatusCode::kInvalidArgument);
    // A bad layout.
    in = p.Input();
    in.vis_begin = p.n();
    EXPECT_EQ(pruner->Begin(in).status().code(), absl::StatusCode::kInvalidArgument);
    // No image: nothing to prune, no error.
    in = p.Input();
    in.n_vis = 0;
    auto kept = pruner->Begin(in);
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_FALSE(kept->has_value());
    for (int l = 0; l < dims.n_layers; ++l) {
      auto r = pruner->AfterLayer(Layer(dims, l, p.n() - p.V, p.prefix, 0));
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_FALSE(r->has_value());
    }
    // A second request on the same pruner starts afresh.
    RunAndCheckRecord(*pruner, p, dims, 8,
                      pruner->stats().method == "divprune"
                          ? static_cast<DivPrunePruner&>(*pruner).selection_order()
                          : static_cast<CdPrunerLlmPruner&>(*pruner).selection_order());
  }
  // CDPruner-LLM takes its relevance from the text after the image: there must be some.
  Prompt last = p;
  last.text = 0;
  last.rows.resize(size_t(last.n()) * last.d);
  CdPrunerLlmPruner cdp(dims, 8);
  EXPECT_EQ(cdp.Begin(last.Input()).status().code(), absl::StatusCode::kInvalidArgument);
  DivPrunePruner div(dims, 8);
  EXPECT_TRUE(div.Begin(last.Input()).ok());
}

}  // namespace
}  // namespace hap
