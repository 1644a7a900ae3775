// Pruning before the LLM (Pruner::Begin: divprune, cdpruner-llm) through the decoder on a tiny
// random checkpoint: every layer sees the K kept visual rows, the KV cache holds exactly K visual
// rows per layer at their original positions, the stats carry one stage "after layer −1", and
// the prefill is bit-identical to the unpruned decoder run on only the kept rows at their
// original positions.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/image/png_encode.h"
#include "runtime/model/llama.h"
#include "runtime/model/pipeline.h"
#include "runtime/tiny/tiny_model.h"
#include "tests/common/tiny_checkpoint.h"

namespace hap {
namespace {

class PreLlmPruneTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/model/pre_llm8";
    auto m = testing_support::WriteAndLoadTiny(testing_support::GqaTinyOptions(13, 8), dir);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = m->release();
    image_ = new std::string(testing_support::SyntheticPng(84, 76, [](size_t i) {
                               return (i * 41 + i / 97) % 251;
                             }).value());
  }
  static void TearDownTestSuite() {
    delete model_;
    delete image_;
  }

  static LlavaModel* model_;
  static std::string* image_;
};
LlavaModel* PreLlmPruneTest::model_ = nullptr;
std::string* PreLlmPruneTest::image_ = nullptr;

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_F(PreLlmPruneTest, EveryLayerSeesTheKeptRowsAtTheirOriginalPositions) {
  const std::string prompt = "Which shape is at the top?";
  const int L = 8, V = 64;
  for (const std::string method : {"divprune", "cdpruner-llm"}) {
    for (int k : {16, 5}) {
      SCOPED_TRACE(method + " K=" + std::to_string(k));
      PruneRequest prune;
      prune.method = method;
      prune.retain = k;
      auto encoded = EncodeImage(*model_, *image_, prune);
      ASSERT_TRUE(encoded.ok()) << encoded.status();
      ASSERT_EQ(encoded->n_vis, V);
      Sampler sampler{SamplingParams{}};
      auto pre = RunPrefill(*model_, prompt, *encoded, prune, &sampler);
      ASSERT_TRUE(pre.ok()) << pre.status();
      const PrefillStats& s = pre->stats;

      // Stats: K in every layer, one stage before layer 0.
      EXPECT_EQ(s.layer_visual_tokens, std::vector<int>(L, k));
      EXPECT_DOUBLE_EQ(s.average_visual_tokens, k);
      ASSERT_EQ(s.stages.size(), 1u);
      EXPECT_EQ(s.stages[0].after_layer, PruneStage::kBeforeLlm);
      EXPECT_EQ(s.stages[0].tokens_before, V);
      EXPECT_EQ(s.stages[0].tokens_kept, k);
      const std::vector<int>& kept = s.prune.kept_original;
      ASSERT_EQ(static_cast<int>(kept.size()), k);
      EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
      EXPECT_EQ(s.stages[0].kept_original, kept);
      EXPECT_EQ(pre->trace.visual_tokens_per_layer, std::vector<int>(L, k));
      EXPECT_EQ(pre->trace.tokens_per_layer, std::vector<int>(L, s.text_tokens + k));

      // The cache: text + K rows in every layer, original positions, nothing else.
      auto tokens = model_->Tokenize(prompt, V);
      ASSERT_TRUE(tokens.ok());
      const int vb = tokens->vis_begin;
      std::vector<int32_t> positions;
      for (int r = 0; r < vb; ++r) positions.push_back(r);
      for (int v : kept) positions.push_back(vb + v);
      for (int r = vb + V; r < s.prompt_tokens; ++r) positions.push_back(r);
      for (int l = 0; l < L; ++l) {
        EXPECT_EQ(pre->cache.layers[l].positions, positions) << "layer " << l;
      }
      EXPECT_EQ(pre->cache.next_position, s.prompt_tokens);
      EXPECT_LT(s.kv_bytes, s.kv_bytes_unpruned);

      // Bit-identical to the plain decoder on the kept rows alone (no pruner involved).
      auto pruner = MakePruner(prune, DimsOf(model_->config()));
      ASSERT_TRUE(pruner.ok());
      auto out = model_->Prefill(*tokens, encoded->embeds, pruner->get());
      ASSERT_TRUE(out.ok()) << out.status();
      std::vector<int32_t> ids = tokens->ids;
      for (int i = 0; i < V; ++i) ids[vb + i] = 0;
      LlamaDecoder plain(model_->config().text, model_->placed_weights().text(), model_->backend());
      auto x = plain.Embed(ids);
      ASSERT_TRUE(x.ok());
      const int d = model_->config().text.hidden_size;
      std::memcpy(x->data() + static_cast<size_t>(vb) * d, encoded->embeds.data(),
                  encoded->embeds.size() * sizeof(float));
      std::vector<float> x_kept;
      for (int32_t p : positions) {  // positions are the original row indices here
        x_kept.insert(x_kept.end(), x->begin() + static_cast<size_t>(p) * d,
                      x->begin() + static_cast<size_t>(p + 1) * d);
      }
      KvCache cache;
      PrefillTrace trace;
      auto logits = plain.Prefill(x_kept, positions, vb, k, nullptr, &cache, &trace);
      ASSERT_TRUE(logits.ok()) << logits.status();
      EXPECT_TRUE(BitEqual(out->logits, *logits));
      for (int l = 0; l < L; ++l) {
        EXPECT_TRUE(BitEqual(out->cache.layers[l].k, cache.layers[l].k)) << "layer " << l;
        EXPECT_TRUE(BitEqual(out->cache.layers[l].v, cache.layers[l].v)) << "layer " << l;
        EXPECT_EQ(out->cache.layers[l].positions, cache.layers[l].positions) << "layer " << l;
      }

      // Decode continues after the unpruned prompt.
      KvCache next = pre->cache;
      auto step = model_->DecodeStep(pre->first_token, &next);
      ASSERT_TRUE(step.ok()) << step.status();
      for (int l = 0; l < L; ++l) EXPECT_EQ(next.layers[l].positions.back(), s.prompt_tokens);
    }
  }
}

TEST_F(PreLlmPruneTest, FullBudgetIsTheUnprunedEngine) {
  // K = V: nothing dropped, logits bit for bit those of the engine without a pruner.
  const std::string prompt = "How many shapes?";
  auto tokens = model_->Tokenize(prompt, 64);
  ASSERT_TRUE(tokens.ok());
  PruneRequest none;
  none.method = "none";
  auto encoded = EncodeImage(*model_, *image_, none);
  ASSERT_TRUE(encoded.ok());
  auto raw = model_->Prefill(*tokens, encoded->embeds, nullptr);
  ASSERT_TRUE(raw.ok());
  for (const std::string method : {"divprune", "cdpruner-llm"}) {
    PruneRequest prune;
    prune.method = method;
    prune.retain = 64;
    auto pruner = MakePruner(prune, DimsOf(model_->config()));
    ASSERT_TRUE(pruner.ok());
    auto out = model_->Prefill(*tokens, encoded->embeds, pruner->get());
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(BitEqual(out->logits, raw->logits)) << method;
    EXPECT_TRUE((*pruner)->stats().stages.empty()) << method;
  }
}

}  // namespace
}  // namespace hap
