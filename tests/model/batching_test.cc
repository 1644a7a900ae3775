// Continuous batching: sequences decoded together (LlamaDecoder::DecodeBatch, DecodeEngine) get
// exactly what they get alone — the same logits bit for bit and the same greedy and seeded
// tokens — whatever their prompt lengths, pruning methods and budgets, on F32 and BF16
// checkpoints.
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/engine/decode_engine.h"
#include "runtime/image/png_encode.h"
#include "runtime/model/pipeline.h"
#include "runtime/model/tiny_model.h"

namespace hap {
namespace {

struct Case {
  std::string method;
  std::optional<double> retain;
  std::string prompt;
  SamplingParams sampling;
};

// 16 different requests: every pruning method, several budgets, prompts of different lengths,
// greedy and seeded sampling.
std::vector<Case> Cases() {
  const std::vector<std::string> prompts = {
      "What colour is the square?", "Is there a circle in the picture on the left side?",
      "How many shapes?", "Where is the red triangle relative to the blue square in this scene?"};
  const std::vector<std::pair<std::string, std::optional<double>>> methods = {
      {"none", std::nullopt}, {"hap", 16.0},     {"hap", 14.0},        {"uniform", 20.0},
      {"fastv", 16.0},        {"pdrop", 24.0},   {"sparsevlm", 16.0},  {"visionzip", 16.0},
      {"random", 20.0},       {"hap", 32.0},     {"none", std::nullopt}, {"hap", 24.0},
      {"fastv", 32.0},        {"uniform", 32.0}, {"pdrop", 16.0},      {"hap", 20.0}};
  std::vector<Case> out;
  for (size_t i = 0; i < methods.size(); ++i) {
    Case c{methods[i].first, methods[i].second, prompts[i % prompts.size()], SamplingParams{}};
    if (i % 3 == 2) {
      c.sampling.temperature = 0.9f;
      c.sampling.top_p = 0.95f;
      c.sampling.seed = 100 + i;
    }
    out.push_back(c);
  }
  return out;
}

class BatchingTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/model/batch_" +
                            std::string(DTypeName(GetParam()));
    TinyModelOptions o;
    o.seed = 5;
    o.layers = 8;
    o.hidden = 64;
    o.heads = 4;
    o.kv_heads = 2;
    o.image_size = 112;  // 64 visual tokens
    o.dtype = GetParam();
    o.corpus_path = std::string(HAP_SOURCE_DIR) + "/data/tokenizer/corpus.txt";
    ASSERT_TRUE(WriteTinyModel(o, dir).ok());
    auto m = LlavaModel::Load(dir, {});
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    RgbImage img;
    img.width = 80;
    img.height = 64;
    img.pixels.resize(80 * 64 * 3);
    for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>((i * 29) % 253);
    image_ = EncodePng(img).value();
  }

  struct Prefilled {
    KvCache cache;
    int32_t first_token;
    Sampler sampler{SamplingParams{}};
  };
  Prefilled Prefill(const Case& c) {
    PruneRequest prune;
    prune.method = c.method;
    prune.retain = c.retain;
    auto encoded = EncodeImage(*model_, image_, prune);
    EXPECT_TRUE(encoded.ok()) << encoded.status();
    Sampler sampler(c.sampling);
    auto prefill = RunPrefill(*model_, c.prompt, *encoded, prune, &sampler);
    EXPECT_TRUE(prefill.ok()) << prefill.status();
    return {std::move(prefill->cache), prefill->first_token, sampler};
  }

  std::unique_ptr<LlavaModel> model_;
  std::string image_;
};

TEST_P(BatchingTest, BatchedStepLogitsEqualSoloStepsBitForBit) {
  const std::vector<Case> cases = Cases();
  const int vocab = model_->config().text.vocab_size;
  for (int b : {1, 2, 3, 7, 16}) {
    SCOPED_TRACE(b);
    std::vector<Prefilled> batch, solo;
    for (int i = 0; i < b; ++i) {
      batch.push_back(Prefill(cases[i]));
      solo.push_back(Prefill(cases[i]));
    }
    // Different lengths from different prompts and budgets: the caches really differ.
    if (b >= 3) EXPECT_NE(batch[1].cache.total_rows(), batch[2].cache.total_rows());
    std::vector<int32_t> tokens(b);
    for (int step = 0; step < 4; ++step) {
      std::vector<KvCache*> caches;
      for (int i = 0; i < b; ++i) {
        tokens[i] = (step == 0 ? batch[i].first_token : tokens[i]);
        caches.push_back(&batch[i].cache);
      }
      auto logits = model_->DecodeBatch(tokens, caches);
      ASSERT_TRUE(logits.ok()) << logits.status();
      ASSERT_EQ(logits->size(), static_cast<size_t>(b) * vocab);
      for (int i = 0; i < b; ++i) {
        auto alone = model_->DecodeStep(tokens[i], &solo[i].cache);
        ASSERT_TRUE(alone.ok());
        ASSERT_EQ(std::memcmp(alone->data(), logits->data() + static_cast<size_t>(i) * vocab,
                              sizeof(float) * vocab),
                  0)
            << "sequence " << i << " step " << step;
        EXPECT_EQ(batch[i].cache.next_position, solo[i].cache.next_position);
        tokens[i] = static_cast<int32_t>(
            std::max_element(alone->begin(), alone->end()) - alone->begin());
      }
    }
  }
}

TEST_P(BatchingTest, EngineTokensEqualSoloRunsForEveryMethodAndSampler) {
  const std::vector<Case> cases = Cases();
  StopCriteria stop;
  stop.max_new_tokens = 10;
  // Solo: the single-sequence decode loop.
  std::vector<DecodeResult> solo;
  for (const Case& c : cases) {
    Prefilled p = Prefill(c);
    auto r = ContinueDecodeLoop(*model_, &p.cache, p.first_token, p.sampler, stop, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    solo.push_back(*r);
  }
  // Together: all 16 submitted at once to an engine that batches up to 16 (and, in a second
  // round, up to 5, so sequences join while others run).
  for (int max_batch : {16, 5}) {
    SCOPED_TRACE(max_batch);
    std::vector<Prefilled> prefilled;
    for (const Case& c : cases) prefilled.push_back(Prefill(c));
    DecodeEngine engine(*model_, DecodeEngineOptions{max_batch});
    std::vector<std::promise<absl::StatusOr<DecodeResult>>> done(cases.size());
    std::vector<std::string> streamed(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      Prefilled& p = prefilled[i];
      DecodeJob job;
      job.cache = std::move(p.cache);
      job.first_token = p.first_token;
      job.sampler = p.sampler;
      job.stop = stop;
      job.sink = [&streamed, i](int32_t, const std::string& d) {
        streamed[i] += d;
        return true;
      };
      job.done = [&done, i](absl::StatusOr<DecodeResult> r) { done[i].set_value(std::move(r)); };
      engine.Submit(std::move(job));
    }
    for (size_t i = 0; i < cases.size(); ++i) {
      absl::StatusOr<DecodeResult> r = done[i].get_future().get();
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->tokens, solo[i].tokens) << "case " << i << " " << cases[i].method;
      EXPECT_EQ(r->text, solo[i].text);
      EXPECT_EQ(streamed[i], r->text);
      EXPECT_EQ(r->finish, solo[i].finish);
    }
    const DecodeEngineStats stats = engine.stats();
    // The steps really were batched, never beyond the limit; with 16 sequences and room for 5,
    // the batch fills up.
    EXPECT_LE(stats.max_batch_seen, max_batch);
    EXPECT_GT(stats.max_batch_seen, 1);
    if (max_batch == 5) EXPECT_EQ(stats.max_batch_seen, 5);
    EXPECT_LT(stats.steps, stats.sequence_steps);
  }
}

TEST_P(BatchingTest, EngineEndsStoppedSequencesAsCancelledAndKeepsTheOthers) {
  const std::vector<Case> cases = Cases();
  StopCriteria stop;
  stop.max_new_tokens = 8;
  DecodeEngine engine(*model_, DecodeEngineOptions{4});
  std::vector<std::promise<absl::StatusOr<DecodeResult>>> done(4);
  for (int i = 0; i < 4; ++i) {
    Prefilled p = Prefill(cases[i]);
    DecodeJob job;
    job.cache = std::move(p.cache);
    job.first_token = p.first_token;
    job.sampler = p.sampler;
    job.stop = stop;
    // Sequence 1's client goes away after its third token; sequence 2 is stopped from outside.
    auto count = std::make_shared<int>(0);
    job.sink = [count, i](int32_t, const std::string&) { return !(i == 1 && ++*count >= 3); };
    job.should_stop = [i] { return i == 2; };
    job.done = [&done, i](absl::StatusOr<DecodeResult> r) { done[i].set_value(std::move(r)); };
    engine.Submit(std::move(job));
  }
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<DecodeResult> r = done[i].get_future().get();
    ASSERT_TRUE(r.ok()) << r.status();
    if (i == 1 || i == 2) {
      EXPECT_EQ(r->finish, FinishReason::kCancelled) << i;
    } else {
      EXPECT_NE(r->finish, FinishReason::kCancelled) << i;
    }
  }
  EXPECT_EQ(engine.running(), 0);
  EXPECT_EQ(engine.waiting(), 0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BatchingTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace hap
