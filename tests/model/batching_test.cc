// Continuous batching: sequences decoded together (LlamaDecoder::DecodeBatch, DecodeEngine) get
// exactly what they get alone — the same logits bit for bit and the same greedy and seeded
// tokens — whatever their prompt lengths, pruning methods and budgets, on F32 and BF16
// checkpoints.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/engine/decode_engine.h"
#include "runtime/engine/paged_kv.h"
#include "runtime/image/png_encode.h"
#include "runtime/model/pipeline.h"
#include "runtime/tiny/tiny_model.h"
#include "tests/common/tiny_checkpoint.h"

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
      {"none", std::nullopt}, {"hap", 16.0},          {"hap", 14.0},          {"uniform", 20.0},
      {"fastv", 16.0},        {"pdrop", 24.0},        {"sparsevlm", 16.0},    {"visionzip", 16.0},
      {"random", 20.0},       {"dart", 32.0},         {"none", std::nullopt}, {"hap-flat", 24.0},
      {"cdpruner-llm", 24.0}, {"uniform-flat", 32.0}, {"pdrop", 16.0},        {"divprune", 20.0}};
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
    const std::string dir =
        std::string(HAP_BINARY_DIR) + "/tests/model/batch_" + std::string(DTypeName(GetParam()));
    dir_ = dir;
    auto m =
        testing_support::WriteAndLoadTiny(testing_support::GqaTinyOptions(5, 8, GetParam()), dir);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    image_ = testing_support::SyntheticPng(80, 64, [](size_t i) { return (i * 29) % 253; }).value();
  }

  struct Prefilled {
    KvCache cache;
    int32_t first_token;
    Sampler sampler{SamplingParams{}};
  };
  Prefilled Prefill(const Case& c) { return PrefillWith(*model_, c); }
  // A job that decodes p's cache (moved out) from its first token with its sampler and hands
  // the result to *done.
  static DecodeJob JobFor(Prefilled& p, const StopCriteria& stop,
                          std::promise<absl::StatusOr<DecodeResult>>* done) {
    DecodeJob job;
    job.cache = std::move(p.cache);
    job.first_token = p.first_token;
    job.sampler = p.sampler;
    job.stop = stop;
    job.done = [done](absl::StatusOr<DecodeResult> r) { done->set_value(std::move(r)); };
    return job;
  }
  // Floats in one row of one layer's K (or V) cache.
  int KvDim() const {
    return model_->config().text.num_key_value_heads * model_->config().text.head_dim;
  }
  // An F32 pool of 16-row blocks with room for `blocks` of them.
  absl::StatusOr<std::unique_ptr<KvBlockPool>> F32Pool(int64_t blocks) const {
    auto sizing = KvBlockPool::Create(16, KvDim(), DType::kF32, int64_t{1} << 30);
    if (!sizing.ok()) return sizing.status();
    return KvBlockPool::Create(16, KvDim(), DType::kF32,
                               blocks * (*sizing)->stats().bytes_per_block);
  }
  // The blocks of such a pool that a sequence holding `cache` and up to max_new_tokens more
  // needs.
  absl::StatusOr<int64_t> F32BlocksFor(const KvCache& cache, int max_new_tokens) const {
    auto sizing = F32Pool(1);
    if (!sizing.ok()) return sizing.status();
    return PagedKv::BlocksFor(**sizing, cache, max_new_tokens);
  }
  Prefilled PrefillWith(const LlavaModel& model, const Case& c) {
    PruneRequest prune;
    prune.method = c.method;
    prune.retain = c.retain;
    auto encoded = EncodeImage(model, image_, prune);
    EXPECT_TRUE(encoded.ok()) << encoded.status();
    Sampler sampler(c.sampling);
    auto prefill = RunPrefill(model, c.prompt, *encoded, prune, &sampler);
    EXPECT_TRUE(prefill.ok()) << prefill.status();
    return {std::move(prefill->cache), prefill->first_token, sampler};
  }
  // The same checkpoint loaded to write BF16 KV caches (ModelOptions::kv_dtype).
  std::unique_ptr<LlavaModel> LoadBf16Kv() {
    ModelOptions o;
    o.kv_dtype = DType::kBF16;
    auto m = LlavaModel::Load(dir_, o);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }

  std::string dir_;
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
    if (b >= 3) {
      EXPECT_NE(batch[1].cache.total_rows(), batch[2].cache.total_rows());
    }
    std::vector<int32_t> tokens(b);
    for (int step = 0; step < 4; ++step) {
      std::vector<KvStore*> caches;
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
        tokens[i] =
            static_cast<int32_t>(std::max_element(alone->begin(), alone->end()) - alone->begin());
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
      DecodeJob job = JobFor(prefilled[i], stop, &done[i]);
      job.sink = [&streamed, i](int32_t, const std::string& d) {
        streamed[i] += d;
        return true;
      };
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
    if (max_batch == 5) {
      EXPECT_EQ(stats.max_batch_seen, 5);
    }
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
    DecodeJob job = JobFor(p, stop, &done[i]);
    // Sequence 1's client goes away after its third token; sequence 2 is stopped from outside.
    auto count = std::make_shared<int>(0);
    job.sink = [count, i](int32_t, const std::string&) { return !(i == 1 && ++*count >= 3); };
    job.should_stop = [i] { return i == 2; };
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

// Paged caches: a batch over PagedKv (F32 blocks) gives exactly the logits of the contiguous
// caches decoded alone; with BF16 blocks the logits stay within the stated tolerance and the
// greedy tokens are the same.
TEST_P(BatchingTest, PagedCachesDecodeLikeContiguousOnes) {
  const std::vector<Case> cases = Cases();
  const int vocab = model_->config().text.vocab_size;
  const int kv_dim = KvDim();
  for (DType kv_dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(kv_dtype));
    auto pool = KvBlockPool::Create(16, kv_dim, kv_dtype, int64_t{64} << 20);
    ASSERT_TRUE(pool.ok()) << pool.status();
    const int b = 8, steps = 5;
    std::vector<Prefilled> solo;
    std::vector<std::unique_ptr<PagedKv>> paged;
    for (int i = 0; i < b; ++i) {
      solo.push_back(Prefill(cases[i]));
      auto p = PagedKv::FromCache(pool->get(), solo.back().cache, steps);
      ASSERT_TRUE(p.ok()) << p.status();
      paged.push_back(std::move(*p));
    }
    std::vector<int32_t> tokens(b);
    for (int i = 0; i < b; ++i) tokens[i] = solo[i].first_token;
    double worst = 0;  // largest |logit difference|
    for (int step = 0; step < steps; ++step) {
      std::vector<KvStore*> stores;
      for (auto& p : paged) stores.push_back(p.get());
      auto logits = model_->DecodeBatch(tokens, stores);
      ASSERT_TRUE(logits.ok()) << logits.status();
      for (int i = 0; i < b; ++i) {
        auto alone = model_->DecodeStep(tokens[i], &solo[i].cache);
        ASSERT_TRUE(alone.ok());
        const float* got = logits->data() + static_cast<size_t>(i) * vocab;
        if (kv_dtype == DType::kF32) {
          ASSERT_EQ(std::memcmp(alone->data(), got, sizeof(float) * vocab), 0) << i;
        }
        for (int t = 0; t < vocab; ++t) {
          const double diff = std::abs(static_cast<double>(got[t]) - (*alone)[t]);
          worst = std::max(worst, diff);
          // BF16 keys and values keep 8 significant bits: logits within 0.02 + 1%.
          if (kv_dtype == DType::kBF16) {
            ASSERT_LE(diff, 0.02 + 0.01 * std::abs((*alone)[t])) << "sequence " << i << " id " << t;
          }
        }
        const int32_t argmax =
            static_cast<int32_t>(std::max_element(alone->begin(), alone->end()) - alone->begin());
        EXPECT_EQ(std::max_element(got, got + vocab) - got, argmax) << "sequence " << i;
        tokens[i] = argmax;
      }
    }
    std::printf("    %s KV: worst logit difference to the F32 contiguous cache %.3g\n",
                std::string(DTypeName(kv_dtype)).c_str(), worst);
    if (kv_dtype == DType::kF32) {
      EXPECT_EQ(worst, 0.0);
    }
    paged.clear();
    EXPECT_EQ((*pool)->stats().blocks_in_use, 0);
  }
}

// A BF16 host cache (what the prefill writes with kv_dtype BF16, and hapctl run decodes) holds
// bit for bit what a BF16 pool makes of the F32 cache's rows, and decodes to exactly the logits
// of that pool's blocks; the prefill itself (logits, first token, kept rows) does not depend on
// the KV dtype.
TEST_P(BatchingTest, Bf16HostCacheHoldsAndDecodesExactlyLikeABf16Pool) {
  std::unique_ptr<LlavaModel> bf16_model = LoadBf16Kv();
  ASSERT_NE(bf16_model, nullptr);
  const std::vector<Case> cases = Cases();
  const int vocab = model_->config().text.vocab_size;
  const int kv_dim = KvDim();
  auto pool = KvBlockPool::Create(16, kv_dim, DType::kBF16, int64_t{64} << 20);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const int steps = 6;
  {
    // The prefill logits themselves, unpruned.
    auto encoded = EncodeImage(*model_, image_, PruneRequest{});
    ASSERT_TRUE(encoded.ok());
    auto tokens = model_->Tokenize(cases[0].prompt, encoded->n_vis);
    ASSERT_TRUE(tokens.ok());
    auto a = model_->Prefill(*tokens, encoded->embeds, nullptr);
    auto b = bf16_model->Prefill(*tokens, encoded->embeds, nullptr);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->logits.size(), b->logits.size());
    EXPECT_EQ(std::memcmp(a->logits.data(), b->logits.data(), sizeof(float) * a->logits.size()), 0);
    EXPECT_EQ(a->cache.dtype(), DType::kF32);
    EXPECT_EQ(b->cache.dtype(), DType::kBF16);
  }
  for (size_t i = 0; i < cases.size(); i += 3) {
    SCOPED_TRACE(::testing::Message() << "case " << i << " " << cases[i].method);
    Prefilled f32 = Prefill(cases[i]);
    Prefilled bf16 = PrefillWith(*bf16_model, cases[i]);
    EXPECT_EQ(bf16.first_token, f32.first_token);
    ASSERT_EQ(bf16.cache.dtype(), DType::kBF16);
    ASSERT_EQ(bf16.cache.n_layers(), f32.cache.n_layers());
    EXPECT_EQ(bf16.cache.bytes() * 2, f32.cache.bytes());
    EXPECT_EQ(bf16.cache.next_position, f32.cache.next_position);
    auto paged = PagedKv::FromCache(pool->get(), f32.cache, steps);
    ASSERT_TRUE(paged.ok()) << paged.status();
    const size_t row_bytes = kv_dim * sizeof(uint16_t);
    for (int l = 0; l < bf16.cache.n_layers(); ++l) {
      const LayerKv& layer = bf16.cache.layers[l];
      ASSERT_EQ(layer.positions, f32.cache.layers[l].positions) << l;
      ASSERT_EQ(layer.k_bf16.size(), static_cast<size_t>(layer.len()) * kv_dim);
      EXPECT_TRUE(layer.k.empty() && layer.v.empty());
      std::vector<KvSpan> spans;
      (*paged)->Spans(l, &spans);
      size_t row = 0;
      for (const KvSpan& span : spans) {
        ASSERT_EQ(std::memcmp(span.k, layer.k_bf16.data() + row * kv_dim, span.rows * row_bytes), 0)
            << "layer " << l << " row " << row;
        ASSERT_EQ(std::memcmp(span.v, layer.v_bf16.data() + row * kv_dim, span.rows * row_bytes), 0)
            << "layer " << l << " row " << row;
        row += span.rows;
      }
      EXPECT_EQ(row, static_cast<size_t>(layer.len()));
    }
    int32_t token = f32.first_token;
    for (int step = 0; step < steps; ++step) {
      auto host = bf16_model->DecodeStep(token, &bf16.cache);
      auto blocks = model_->DecodeStep(token, paged->get());
      ASSERT_TRUE(host.ok() && blocks.ok());
      ASSERT_EQ(std::memcmp(host->data(), blocks->data(), sizeof(float) * vocab), 0)
          << "step " << step;
      token = static_cast<int32_t>(std::max_element(host->begin(), host->end()) - host->begin());
    }
  }
  EXPECT_EQ((*pool)->stats().blocks_in_use, 0);
}

// The decode loop on a BF16 host cache (hapctl run --kv-dtype bf16) and the engine over a BF16
// pool (hap-decode --kv-dtype bf16), fed the F32 rows or the BF16 ones, give the same tokens.
TEST_P(BatchingTest, Bf16DecodeLoopEqualsTheEngineOnABf16Pool) {
  std::unique_ptr<LlavaModel> bf16_model = LoadBf16Kv();
  ASSERT_NE(bf16_model, nullptr);
  const std::vector<Case> cases = Cases();
  const int kv_dim = KvDim();
  auto pool = KvBlockPool::Create(16, kv_dim, DType::kBF16, int64_t{64} << 20);
  ASSERT_TRUE(pool.ok()) << pool.status();
  StopCriteria stop;
  stop.max_new_tokens = 10;
  std::vector<DecodeResult> solo;
  for (const Case& c : cases) {
    Prefilled p = PrefillWith(*bf16_model, c);
    auto r = ContinueDecodeLoop(*bf16_model, &p.cache, p.first_token, p.sampler, stop, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    solo.push_back(*r);
  }
  for (bool bf16_rows : {false, true}) {
    SCOPED_TRACE(bf16_rows ? "BF16 rows" : "F32 rows");
    DecodeEngineOptions options;
    options.max_batch = 16;
    options.pool = pool->get();
    DecodeEngine engine(*model_, options);
    std::vector<std::promise<absl::StatusOr<DecodeResult>>> done(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      Prefilled p = bf16_rows ? PrefillWith(*bf16_model, cases[i]) : Prefill(cases[i]);
      engine.Submit(JobFor(p, stop, &done[i]));
    }
    for (size_t i = 0; i < cases.size(); ++i) {
      absl::StatusOr<DecodeResult> r = done[i].get_future().get();
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->tokens, solo[i].tokens) << "case " << i << " " << cases[i].method;
      EXPECT_EQ(r->text, solo[i].text);
    }
  }
  EXPECT_EQ((*pool)->stats().blocks_in_use, 0);
}

// A pruned request holds, per layer, its planned rows (text + the layer's visual tokens + the
// tokens it may still generate) rounded up to blocks — fewer in pruned groups — and gives them
// all back.
TEST_P(BatchingTest, PagedBlocksFollowThePlannedGroupLengths) {
  const int kv_dim = KvDim();
  auto pool = KvBlockPool::Create(16, kv_dim, DType::kF32, int64_t{64} << 20);
  ASSERT_TRUE(pool.ok());
  for (double retain : {14.0, 20.0, 32.0}) {
    SCOPED_TRACE(retain);
    PruneRequest prune;
    prune.method = "hap";
    prune.retain = retain;
    auto encoded = EncodeImage(*model_, image_, prune);
    ASSERT_TRUE(encoded.ok());
    Sampler sampler{SamplingParams{}};
    auto prefill = RunPrefill(*model_, "What colour is the square?", *encoded, prune, &sampler);
    ASSERT_TRUE(prefill.ok()) << prefill.status();
    const PrefillStats& s = prefill->stats;
    const int reserve = 12;
    int64_t want = 0, unpruned = 0;
    for (int v : s.layer_visual_tokens) {
      want += (s.text_tokens + v + reserve + 15) / 16;
      unpruned += (s.prompt_tokens + reserve + 15) / 16;
    }
    auto paged = PagedKv::FromCache(pool->get(), prefill->cache, reserve);
    ASSERT_TRUE(paged.ok());
    EXPECT_EQ((*paged)->blocks_held(), want);
    EXPECT_EQ((*pool)->stats().blocks_in_use, want);
    EXPECT_LT(want, unpruned);
    // Layers of one group hold equal block counts; a later (more pruned) group never more.
    for (int l = 1; l < (*paged)->n_layers(); ++l) {
      EXPECT_LE((*paged)->blocks(l), (*paged)->blocks(l - 1)) << l;
    }
    for (int l = 0; l < (*paged)->n_layers(); ++l) {
      EXPECT_EQ((*paged)->positions(l), prefill->cache.layers[l].positions) << l;
    }
    paged->reset();
    EXPECT_EQ((*pool)->stats().blocks_in_use, 0);
  }
}

// A full pool: sequences wait for blocks and all finish; one that needs more than the whole pool
// is refused with RESOURCE_EXHAUSTED; cancelled, stopped and failed sequences give their blocks
// back (the pool's counter returns to 0).
TEST_P(BatchingTest, FullPoolQueuesRefusesAndNeverLeaks) {
  const std::vector<Case> cases = Cases();
  StopCriteria stop;
  stop.max_new_tokens = 6;
  Prefilled probe = Prefill(cases[0]);
  const absl::StatusOr<int64_t> one = F32BlocksFor(probe.cache, stop.max_new_tokens);
  ASSERT_TRUE(one.ok());
  auto pool = F32Pool(2 * *one + 1);  // room for two of these sequences at once
  ASSERT_TRUE(pool.ok());
  DecodeEngineOptions options;
  options.max_batch = 8;
  options.pool = pool->get();
  std::vector<DecodeResult> solo;
  {
    DecodeEngine engine(*model_, options);
    constexpr int kJobs = 6;
    std::vector<std::promise<absl::StatusOr<DecodeResult>>> done(kJobs + 4);
    std::vector<Prefilled> pre;
    for (int i = 0; i < kJobs; ++i) pre.push_back(Prefill(cases[0]));
    for (int i = 0; i < kJobs; ++i) engine.Submit(JobFor(pre[i], stop, &done[i]));
    // Too big for the pool even when empty.
    {
      Prefilled p = Prefill(cases[0]);
      StopCriteria huge;
      huge.max_new_tokens = 100000;
      engine.Submit(JobFor(p, huge, &done[kJobs]));
    }
    // Cancelled by its sink, stopped from outside, and failing at the end of the context.
    for (int k = 1; k <= 3; ++k) {
      Prefilled p = Prefill(cases[k]);
      DecodeJob job = JobFor(p, stop, &done[kJobs + k]);
      if (k == 1) job.sink = [](int32_t, const std::string&) { return false; };
      if (k == 2) job.should_stop = [] { return true; };
      if (k == 3) job.cache.next_position = model_->config().text.max_position_embeddings - 2;
      engine.Submit(std::move(job));
    }
    std::vector<int32_t> first_tokens;
    for (int i = 0; i < kJobs; ++i) {
      absl::StatusOr<DecodeResult> r = done[i].get_future().get();
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(static_cast<int>(r->tokens.size()), stop.max_new_tokens);
      if (i > 0) {
        EXPECT_EQ(r->tokens, first_tokens);
      }
      first_tokens = r->tokens;
    }
    absl::StatusOr<DecodeResult> big = done[kJobs].get_future().get();
    EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
    EXPECT_EQ(done[kJobs + 1].get_future().get()->finish, FinishReason::kCancelled);
    EXPECT_EQ(done[kJobs + 2].get_future().get()->finish, FinishReason::kCancelled);
    absl::StatusOr<DecodeResult> failed = done[kJobs + 3].get_future().get();
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kOutOfRange) << failed.status();
    const KvPoolStats stats = (*pool)->stats();
    EXPECT_LE(stats.blocks_peak, stats.blocks_total);
    EXPECT_GE(stats.blocks_peak, 2 * *one);  // two ran together
  }
  EXPECT_EQ((*pool)->stats().blocks_in_use, 0);
}

// A job that already holds its blocks (its KV transfer landed in them) is admitted even when a
// job ahead of it waits for blocks — the ones it holds. The pool has room for one sequence: the
// host-cache job submitted first must wait for the landed one, which must not wait for it.
TEST_P(BatchingTest, ALandedJobIsNotStuckBehindOneWaitingForItsBlocks) {
  const std::vector<Case> cases = Cases();
  StopCriteria stop;
  stop.max_new_tokens = 4;
  Prefilled first = Prefill(cases[0]), landed = Prefill(cases[0]);
  const absl::StatusOr<int64_t> one = F32BlocksFor(first.cache, stop.max_new_tokens);
  ASSERT_TRUE(one.ok());
  auto pool = F32Pool(*one);
  ASSERT_TRUE(pool.ok());
  DecodeEngineOptions options;
  options.max_batch = 4;
  options.pool = pool->get();
  std::promise<absl::StatusOr<DecodeResult>> done[2];
  {
    DecodeEngine engine(*model_, options);
    auto paged = PagedKv::FromCache(pool->get(), landed.cache, stop.max_new_tokens);
    ASSERT_TRUE(paged.ok());
    EXPECT_EQ((*pool)->stats().blocks_in_use, *one);  // the pool is full
    for (int i = 0; i < 2; ++i) {
      Prefilled& p = i == 0 ? first : landed;
      DecodeJob job;
      if (i == 0) {
        job.cache = std::move(p.cache);
      } else {
        job.paged = std::move(*paged);
      }
      job.first_token = p.first_token;
      job.sampler = p.sampler;
      job.stop = stop;
      job.done = [&done, i](absl::StatusOr<DecodeResult> r) { done[i].set_value(std::move(r)); };
      engine.Submit(std::move(job));
    }
    for (int i = 0; i < 2; ++i) {
      auto f = done[i].get_future();
      ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "job " << i;
      const absl::StatusOr<DecodeResult> r = f.get();
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->tokens.size(), 4u);
    }
  }
  EXPECT_EQ((*pool)->stats().blocks_in_use, 0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BatchingTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace hap
