// The engine with pruning on a tiny random checkpoint: "none" and HAP at a 100% budget are
// bit-identical to the unpruned engine; per-layer token counts follow the plan; the KV cache
// holds exactly the rows each layer processed; decode continues at the original positions.
#include "runtime/model/pipeline.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "runtime/engine/decode_engine.h"
#include "runtime/image/png_encode.h"
#include "runtime/prune/planner.h"
#include "runtime/tiny/tiny_model.h"
#include "tests/common/tiny_checkpoint.h"

namespace hap {
namespace {

class PipelineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::string(HAP_BINARY_DIR) + "/tests/model/tiny8");
    auto m = testing_support::WriteAndLoadTiny(testing_support::GqaTinyOptions(11, 8), *dir_);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = m->release();
    auto png = testing_support::SyntheticPng(90, 70, [](size_t i) { return (i * 37) % 251; });
    ASSERT_TRUE(png.ok());
    image_ = new std::string(*png);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete dir_;
    delete image_;
  }

  GenerateRequest Request(const std::string& method, std::optional<double> retain) const {
    GenerateRequest r;
    r.image_bytes = *image_;
    r.prompt = "What colour is the square on the left?";
    r.prune.method = method;
    r.prune.retain = retain;
    r.stop.max_new_tokens = 12;
    return r;
  }

  static LlavaModel* model_;
  static std::string* dir_;
  static std::string* image_;
};
LlavaModel* PipelineTest::model_ = nullptr;
std::string* PipelineTest::dir_ = nullptr;
std::string* PipelineTest::image_ = nullptr;

// The engine without any pruning code involved: stages called directly, null pruner.
struct RawRun {
  std::vector<float> logits;
  std::vector<int32_t> tokens;
};
RawRun RawEngine(const LlavaModel& m, const std::string& image, const std::string& prompt,
                 int max_new) {
  RawRun out;
  auto pixels = m.PreprocessImage(image);
  EXPECT_TRUE(pixels.ok());
  auto feats = m.VisionFeatures(*pixels, nullptr);
  const int n = static_cast<int>(feats->size() / m.config().vision.hidden_size);
  auto embeds = m.Project(*feats, n);
  auto tokens = m.Tokenize(prompt, n);
  auto prefill = m.Prefill(*tokens, *embeds, nullptr);
  EXPECT_TRUE(prefill.ok());
  out.logits = prefill->logits;
  StopCriteria stop;
  stop.max_new_tokens = max_new;
  auto dec = RunDecodeLoop(m, &prefill->cache, prefill->logits, SamplingParams{}, stop, nullptr);
  EXPECT_TRUE(dec.ok());
  out.tokens = dec->tokens;
  return out;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The warm-up requests a service runs before serving (encode; prefill with the default method,
// alone or as a batched pass of two; a decode step of a whole batch) succeed with the methods that
// prune in the encoder and in the LLM, and leave nothing behind: a request after them answers bit
// for bit as before them.
TEST_F(PipelineTest, WarmUpRequestsRunAndChangeNothing) {
  const GenerateRequest request = Request("hap", 16);
  absl::StatusOr<GenerateResult> before = Generate(*model_, request, nullptr);
  ASSERT_TRUE(before.ok()) << before.status();
  for (const char* method : {"none", "hap", "visionzip"}) {
    PruneRequest prune;
    prune.method = method;
    if (prune.method != "none") prune.retain = 16;
    absl::StatusOr<double> encode = WarmUpEncode(*model_, prune);
    ASSERT_TRUE(encode.ok()) << method << ": " << encode.status();
    EXPECT_GE(*encode, 0);
    if (prune.method != "visionzip") {  // VisionZip prunes in the encoder only
      absl::StatusOr<double> prefill = WarmUpPrefill(*model_, prune);
      ASSERT_TRUE(prefill.ok()) << method << ": " << prefill.status();
      // A service that batches its prefills warms up with a pass of two.
      absl::StatusOr<double> batched = WarmUpPrefill(*model_, prune, 2);
      ASSERT_TRUE(batched.ok()) << method << ": " << batched.status();
    }
  }
  int64_t workspace = -1;
  ASSERT_TRUE(WarmUpDecode(*model_, 4, DType::kBF16, &workspace).ok());
  EXPECT_EQ(workspace, 0);  // the CPU backend holds no device memory
  absl::StatusOr<GenerateResult> after = Generate(*model_, request, nullptr);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->decode.tokens, before->decode.tokens);
  EXPECT_EQ(after->decode.text, before->decode.text);
}

TEST_F(PipelineTest, NoneAndFullBudgetHapAreBitIdenticalToTheEngine) {
  const RawRun raw = RawEngine(*model_, *image_, "What colour is the square on the left?", 12);
  for (auto [method, retain] : std::vector<std::pair<std::string, std::optional<double>>>{
           {"none", std::nullopt}, {"hap", 64.0}, {"uniform", 64.0}}) {
    SCOPED_TRACE(method);
    GenerateRequest req = Request(method, retain);
    auto encoded = EncodeImage(*model_, req.image_bytes, req.prune);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    Sampler sampler(req.sampling);
    auto prefill = RunPrefill(*model_, req.prompt, *encoded, req.prune, &sampler);
    ASSERT_TRUE(prefill.ok()) << prefill.status();
    EXPECT_EQ(prefill->stats.average_visual_tokens, 64.0);
    auto res = Generate(*model_, req, nullptr);
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->decode.tokens, raw.tokens);
    // Logits bit for bit: rerun prefill through the model with the method's pruner.
    auto tokens = model_->Tokenize(req.prompt, 64);
    auto pruner = MakePruner(req.prune, DimsOf(model_->config()));
    ASSERT_TRUE(pruner.ok());
    auto out =
        model_->Prefill(*tokens, encoded->embeds, method == "none" ? nullptr : pruner->get());
    ASSERT_TRUE(out.ok());
    EXPECT_TRUE(BitEqual(out->logits, raw.logits));
  }
}

TEST_F(PipelineTest, HapLayerTokensFollowThePlanAndKvHoldsExactlyThoseRows) {
  for (double retain : {32.0, 20.0, 14.0}) {
    SCOPED_TRACE(retain);
    GenerateRequest req = Request("hap", retain);
    auto encoded = EncodeImage(*model_, req.image_bytes, req.prune);
    ASSERT_TRUE(encoded.ok());
    Sampler sampler(req.sampling);
    auto prefill = RunPrefill(*model_, req.prompt, *encoded, req.prune, &sampler);
    ASSERT_TRUE(prefill.ok()) << prefill.status();
    const PrefillStats& s = prefill->stats;
    auto plan = MakePlan(DimsOf(model_->config()), Budget::Retain(retain), s.text_tokens);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(s.layer_visual_tokens, plan->layer_visual_tokens);
    EXPECT_LE(s.average_visual_tokens, retain);
    EXPECT_EQ(static_cast<int>(s.stages.size()), plan->M - 1);

    const KvCache& kv = prefill->cache;
    const int kv_dim = model_->config().text.num_key_value_heads * model_->config().text.head_dim;
    int64_t rows = 0;
    for (int l = 0; l < 8; ++l) {
      const LayerKv& layer = kv.layers[l];
      EXPECT_EQ(layer.len(), s.text_tokens + plan->layer_visual_tokens[l]) << "layer " << l;
      EXPECT_EQ(layer.k.size(), static_cast<size_t>(layer.len()) * kv_dim);
      EXPECT_EQ(layer.v.size(), static_cast<size_t>(layer.len()) * kv_dim);
      // Kept tokens keep their original positions: strictly ascending, ending at prompt − 1.
      for (int i = 1; i < layer.len(); ++i) EXPECT_LT(layer.positions[i - 1], layer.positions[i]);
      EXPECT_EQ(layer.positions.back(), s.prompt_tokens - 1);
      rows += layer.len();
    }
    EXPECT_EQ(kv.bytes(), rows * kv_dim * 2 * 4);
    EXPECT_EQ(s.kv_bytes, kv.bytes());
    EXPECT_EQ(s.kv_bytes_unpruned, 8LL * s.prompt_tokens * kv_dim * 2 * 4);
    EXPECT_EQ(kv.next_position, s.prompt_tokens);

    // Decode continues from the unpruned prompt length in every layer.
    KvCache cache = prefill->cache;
    auto logits = model_->DecodeStep(prefill->first_token, &cache);
    ASSERT_TRUE(logits.ok());
    for (int l = 0; l < 8; ++l) EXPECT_EQ(cache.layers[l].positions.back(), s.prompt_tokens);
    EXPECT_EQ(cache.next_position, s.prompt_tokens + 1);
  }
}

TEST_F(PipelineTest, EveryMethodGeneratesAfterPruning) {
  for (const std::string& method : PruneMethods()) {
    SCOPED_TRACE(method);
    GenerateRequest req = Request(method, method == "none" ? std::nullopt : std::optional(16.0));
    auto res = Generate(*model_, req, nullptr);
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_FALSE(res->decode.tokens.empty());
    EXPECT_TRUE(res->decode.finish == FinishReason::kLength ||
                res->decode.finish == FinishReason::kEos);
    if (method != "none") {
      EXPECT_LT(res->stats.kv_bytes, res->stats.kv_bytes_unpruned);
      EXPECT_LT(res->stats.flops_full, res->stats.unpruned_flops_full);
    }
  }
}

TEST_F(PipelineTest, SampledGenerationIsReproducibleFromTheSeed) {
  GenerateRequest req = Request("hap", 20.0);
  req.sampling.temperature = 0.8f;
  req.sampling.top_p = 0.9f;
  req.sampling.seed = 1234;
  auto a = Generate(*model_, req, nullptr);
  auto b = Generate(*model_, req, nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->decode.tokens, b->decode.tokens);
  req.sampling.seed = 4321;
  auto c = Generate(*model_, req, nullptr);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->decode.tokens, c->decode.tokens);
}

TEST_F(PipelineTest, StopStringEndsGenerationWithoutEmittingIt) {
  GenerateRequest req = Request("none", std::nullopt);
  auto full = Generate(*model_, req, nullptr);
  ASSERT_TRUE(full.ok());
  ASSERT_GE(full->decode.text.size(), 4u);
  const std::string stop = full->decode.text.substr(2, 2);
  req.stop.stop_strings = {stop};
  std::string streamed;
  auto res = Generate(*model_, req, [&](int32_t, const std::string& d) {
    streamed += d;
    return true;
  });
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->decode.finish, FinishReason::kStop);
  EXPECT_EQ(res->decode.text, full->decode.text.substr(0, full->decode.text.find(stop)));
  EXPECT_EQ(streamed, res->decode.text);
}

}  // namespace
}  // namespace hap
