// The front door's layer groups (hap.prefill.group spans, per-group metrics) from a prefill's
// stats and trace: boundaries at the pruning stages, tokens in/out, time sums, mean head PAQ and
// the effective number of heads 1/Σw², on hand-made records.
#include "gtest/gtest.h"
#include "services/prefill/prefill_telemetry.h"

namespace hap::svc {
namespace {

// 6 layers: groups [0,1] (16 → 8), [2,3] (8 → 4), [4,5] (4, last).
void MakeRecord(PrefillStats* stats, PrefillTrace* trace) {
  trace->visual_tokens_per_layer = {16, 16, 8, 8, 4, 4};
  trace->layer_ms = {1, 2, 3, 4, 5, 6};
  trace->prune_ms = {0.1, 0.2, 0.3, 0.4, 0, 0};
  stats->stages = {{3, 8, 4, 0, {}}, {1, 16, 8, 0, {}}};  // out of order on purpose
  // Layers 0..3 scored their heads (2 heads each).
  auto layer = [](int l, std::vector<float> paq, std::vector<float> w) {
    HapLayerExplain x;
    x.layer = l;
    x.head_paq = std::move(paq);
    x.head_weights = std::move(w);
    return x;
  };
  stats->prune.hap_layers = {layer(0, {0.2f, 0.4f}, {0.5f, 0.5f}), layer(1, {0.6f, 0.8f}, {1, 0}),
                             layer(2, {0.1f, 0.1f}, {0.5f, 0.5f}),
                             layer(3, {0.3f, 0.5f}, {0.5f, 0.5f})};
}

TEST(LayerGroups, BoundariesTokensTimesAndHeadStatistics) {
  PrefillStats stats;
  PrefillTrace trace;
  MakeRecord(&stats, &trace);
  const std::vector<LayerGroup> g = LayerGroups(stats, trace);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].first_layer, 0);
  EXPECT_EQ(g[0].n_layers, 2);
  EXPECT_EQ(g[0].visual_tokens_in, 16);
  EXPECT_EQ(g[0].visual_tokens_out, 8);
  EXPECT_DOUBLE_EQ(g[0].time_ms, 3);
  EXPECT_NEAR(g[0].prune_ms, 0.3, 1e-12);
  // mean PAQ over both layers' heads: (0.2+0.4+0.6+0.8)/4; effective heads: mean(2, 1).
  EXPECT_NEAR(*g[0].mean_head_paq, 0.5, 1e-6);
  EXPECT_NEAR(*g[0].effective_heads, 1.5, 1e-6);
  EXPECT_EQ(g[1].first_layer, 2);
  EXPECT_EQ(g[1].visual_tokens_in, 8);
  EXPECT_EQ(g[1].visual_tokens_out, 4);
  EXPECT_DOUBLE_EQ(g[1].time_ms, 7);
  EXPECT_NEAR(*g[1].mean_head_paq, 0.25, 1e-6);
  EXPECT_NEAR(*g[1].effective_heads, 2, 1e-6);
  EXPECT_EQ(g[2].index, 2);
  EXPECT_EQ(g[2].first_layer, 4);
  EXPECT_EQ(g[2].n_layers, 2);
  EXPECT_EQ(g[2].visual_tokens_in, 4);
  EXPECT_EQ(g[2].visual_tokens_out, 4);
  EXPECT_DOUBLE_EQ(g[2].time_ms, 11);
  EXPECT_FALSE(g[2].mean_head_paq.has_value());
  EXPECT_FALSE(g[2].effective_heads.has_value());
}

TEST(LayerGroups, NoPruningIsOneGroupAndNoLayersIsNone) {
  PrefillStats stats;
  PrefillTrace trace;
  trace.visual_tokens_per_layer = {16, 16, 16};
  trace.layer_ms = {1, 1, 1};
  const std::vector<LayerGroup> g = LayerGroups(stats, trace);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].n_layers, 3);
  EXPECT_EQ(g[0].visual_tokens_out, 16);
  EXPECT_TRUE(LayerGroups(stats, PrefillTrace()).empty());
  // A stage after the last layer (the image's tokens dropped at the very end) ends the only group.
  stats.stages = {{2, 16, 4, 0, {}}};
  const std::vector<LayerGroup> h = LayerGroups(stats, trace);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].visual_tokens_out, 4);
}

}  // namespace
}  // namespace hap::svc
