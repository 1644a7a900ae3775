// Batched prefill (LlamaDecoder::PrefillBatchInto through LlavaModel::PrefillBatch): prompts of
// different lengths, pruning methods and budgets prefilled in one pass get what each gets alone —
// the same kept visual tokens at every stage, the same KV rows (F32) and positions in every layer
// and the same last-row logits, bit for bit — on the CUDA backend executed by the SIMT emulation,
// F32 checkpoints (the scalar attention kernel) and BF16 ones (FlashAttention), and on the CPU
// backend with BF16 weights, whose prefill products (Bf16Gemm) give a row the same result whatever
// the rows beside it (OpenBLAS's F32 sgemm picks its kernels by shape). On the emulation the pass
// makes one attention launch per layer for the whole batch.
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/emulation_counts.h"
#include "runtime/model/cancellation.h"
#include "runtime/model/pipeline.h"
#include "runtime/prune/factory.h"
#include "runtime/tiny/tiny_model.h"
#include "tests/common/pattern_png.h"
#include "tests/common/tiny_checkpoint.h"

namespace hap {
namespace {

struct Case {
  std::string method;
  std::optional<double> retain;
  std::string question;
};

// Prompts of different lengths; methods that prune after layers (on the device there: HAP), on
// the host after a layer (FastV, PDrop, uniform), before the LLM from the input embeddings
// (DivPrune) or not at all.
const std::vector<Case>& FourPrompts() {
  static const std::vector<Case> cases = {
      {"hap", 16.0, "What colour is the square in the picture?"},
      {"none", std::nullopt, "How many shapes?"},
      {"fastv", 24.0, "Where is the red triangle relative to the blue square in this scene?"},
      {"uniform", 32.0, "Is there a circle on the left side of the picture?"}};
  return cases;
}
const std::vector<Case>& SixPrompts() {
  static const std::vector<Case> cases = {
      {"pdrop", 24.0, "Describe the picture."},
      {"hap", 20.0, "What is the largest shape in the picture and what colour is it?"},
      {"divprune", 20.0, "How many shapes?"},
      {"hap-flat", 24.0, "Is there a circle on the left side of the picture?"},
      {"random", 20.0, "What colour is the square in the picture?"},
      {"sparsevlm", 16.0, "Where is the triangle?"}};
  return cases;
}

// One prompt ready to prefill: its tokens, image embeddings and a fresh pruner.
struct Prepared {
  PromptTokens tokens;
  std::vector<float> embeds;
  std::unique_ptr<Pruner> pruner;
};

// What a prefill gave one prompt.
struct Result {
  std::vector<float> logits;
  std::vector<std::vector<float>> k, v;  // per layer, F32 rows
  std::vector<std::vector<int32_t>> positions;
  int32_t next_position = 0;
  std::vector<int> tokens_per_layer;
  std::vector<std::vector<int>> stages;  // each stage's kept visual tokens (original indices)
};

struct Setup {
  std::string backend;  // "cpu" or "cuda"
  DType weights;
};

void PrintTo(const Setup& s, std::ostream* os) { *os << s.backend << " " << DTypeName(s.weights); }

class BatchedPrefillTest : public ::testing::TestWithParam<Setup> {
 protected:
  void SetUp() override {
    if (GetParam().backend == "cpu" && !cpu::HasBf16DotProduct()) {
      GTEST_SKIP() << "without AVX512-BF16 the CPU's BF16 products are sgemm's, chosen by shape";
    }
    const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/model/batched_prefill_" +
                            std::string(DTypeName(GetParam().weights));
    ModelOptions options;
    if (GetParam().backend == "cuda") options.backend = *GetCudaBackend();
    auto m = testing_support::WriteAndLoadTiny(
        testing_support::GqaTinyOptions(11, 6, GetParam().weights), dir, options);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    PruneRequest none;
    none.method = "none";
    auto encoded = EncodeImage(*model_, hap::testing::PatternPng(), none);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    embeds_ = encoded->embeds;
    n_vis_ = encoded->n_vis;
  }

  Prepared Prepare(const Case& c) {
    Prepared p;
    absl::StatusOr<PromptTokens> tokens = model_->Tokenize(PromptText{c.question}, n_vis_);
    EXPECT_TRUE(tokens.ok()) << tokens.status();
    p.tokens = *tokens;
    p.embeds = embeds_;
    PruneRequest prune;
    prune.method = c.method;
    prune.retain = c.retain;
    prune.text_tokens = static_cast<int>(p.tokens.ids.size()) - p.tokens.n_vis;
    auto pruner = MakePruner(prune, DimsOf(model_->config()));
    EXPECT_TRUE(pruner.ok()) << pruner.status();
    if (pruner.ok()) p.pruner = std::move(*pruner);
    return p;
  }

  // The batch's prompts, pointing into `prepared`.
  static std::vector<PrefillPrompt> PromptsOf(const std::vector<Prepared>& prepared) {
    std::vector<PrefillPrompt> prompts;
    for (const Prepared& p : prepared) {
      PrefillPrompt prompt;
      prompt.prompt = &p.tokens;
      prompt.image_embeds = &p.embeds;
      prompt.pruner = p.pruner.get();
      prompts.push_back(prompt);
    }
    return prompts;
  }

  Result Collect(const PrefillOutput& out, const Pruner* pruner) {
    Result r;
    r.logits = out.logits;
    const KvStore& kv = out.kv();
    const int kv_dim = model_->config().text.num_key_value_heads * model_->config().text.head_dim;
    for (int l = 0; l < kv.n_layers(); ++l) {
      const int rows = kv.len(l);
      std::vector<float> k(static_cast<size_t>(rows) * kv_dim), v(k.size());
      std::vector<int32_t> pos(static_cast<size_t>(rows));
      EXPECT_TRUE(kv.ReadRows(l, 0, rows, k.data(), v.data(), pos.data()).ok());
      r.k.push_back(std::move(k));
      r.v.push_back(std::move(v));
      r.positions.push_back(std::move(pos));
    }
    r.next_position = kv.next_position;
    r.tokens_per_layer = out.trace.tokens_per_layer;
    if (pruner != nullptr) {
      for (const PruneStage& st : pruner->stats().stages) r.stages.push_back(st.kept_original);
    }
    return r;
  }

  // Each case alone, then all in one batch: every prompt's results equal, bit for bit.
  void ExpectBatchEqualsSolo(const std::vector<Case>& cases) {
    const std::vector<Result> solo = Solo(cases);
    std::vector<Prepared> prepared;
    for (const Case& c : cases) prepared.push_back(Prepare(c));
    const std::vector<PrefillPrompt> prompts = PromptsOf(prepared);
    const int64_t attention_before = Attentions();
    absl::StatusOr<std::vector<PrefillOutput>> outs = model_->PrefillBatch(prompts);
    ASSERT_TRUE(outs.ok()) << outs.status();
    ASSERT_EQ(outs->size(), cases.size());
    if (GetParam().backend == "cuda") {
      // One variable-length attention per layer for all the prompts, whatever their stages.
      EXPECT_EQ(Attentions() - attention_before, model_->config().text.num_hidden_layers);
    }
    bool pruned = false;
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(cases[i].method + " " + cases[i].question);
      ExpectSame(Collect((*outs)[i], prepared[i].pruner.get()), solo[i]);
      pruned = pruned || !solo[i].stages.empty();
    }
    EXPECT_TRUE(pruned);
  }

  // Each case alone.
  std::vector<Result> Solo(const std::vector<Case>& cases) {
    std::vector<Result> solo;
    for (const Case& c : cases) {
      Prepared p = Prepare(c);
      absl::StatusOr<PrefillOutput> out = model_->Prefill(p.tokens, p.embeds, p.pruner.get());
      EXPECT_TRUE(out.ok()) << c.method << ": " << out.status();
      solo.push_back(out.ok() ? Collect(*out, p.pruner.get()) : Result{});
    }
    return solo;
  }

  // A prompt's results in a batch equal its results alone, bit for bit.
  static void ExpectSame(const Result& batched, const Result& alone) {
    EXPECT_EQ(batched.stages, alone.stages);
    EXPECT_EQ(batched.tokens_per_layer, alone.tokens_per_layer);
    EXPECT_EQ(batched.next_position, alone.next_position);
    ASSERT_EQ(batched.k.size(), alone.k.size());
    for (size_t l = 0; l < alone.k.size(); ++l) {
      EXPECT_EQ(batched.positions[l], alone.positions[l]) << "layer " << l;
      ASSERT_EQ(batched.k[l].size(), alone.k[l].size()) << "layer " << l;
      EXPECT_EQ(std::memcmp(batched.k[l].data(), alone.k[l].data(), 4 * alone.k[l].size()), 0)
          << "K of layer " << l;
      EXPECT_EQ(std::memcmp(batched.v[l].data(), alone.v[l].data(), 4 * alone.v[l].size()), 0)
          << "V of layer " << l;
    }
    ASSERT_EQ(batched.logits.size(), alone.logits.size());
    EXPECT_EQ(std::memcmp(batched.logits.data(), alone.logits.data(), 4 * alone.logits.size()), 0);
  }

  // The rows each layer of a pass over `prompts` processes, as the decoder reports them to the
  // slice hook (BeforeLayer).
  absl::StatusOr<std::vector<PrefillOutput>> PassRows(const std::vector<PrefillPrompt>& prompts,
                                                      std::vector<int64_t>* rows) {
    ScopedTurnHook hook([rows](int64_t n) { rows->push_back(n); });
    return model_->PrefillBatch(prompts);
  }

  // One request per case for RunPrefillBatch, on the pattern image (null if it cannot be
  // encoded).
  struct Requests {
    EncodeResult encoded;
    std::vector<Case> cases;
    std::vector<PromptText> prompts;
    std::vector<Sampler> samplers;
    std::vector<PrefillJob> jobs;
  };
  std::unique_ptr<Requests> RequestsOf(const std::vector<Case>& cases) {
    PruneRequest none;
    none.method = "none";
    absl::StatusOr<EncodeResult> encoded = EncodeImage(*model_, hap::testing::PatternPng(), none);
    EXPECT_TRUE(encoded.ok()) << encoded.status();
    if (!encoded.ok()) return nullptr;
    auto r = std::make_unique<Requests>();
    r->encoded = std::move(*encoded);
    r->cases = cases;
    for (const Case& c : cases) r->prompts.emplace_back(c.question);
    r->samplers.assign(cases.size(), Sampler{SamplingParams{}});
    r->jobs.resize(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      r->jobs[i].prompt = &r->prompts[i];
      r->jobs[i].encoded = &r->encoded;
      r->jobs[i].prune.method = cases[i].method;
      r->jobs[i].prune.retain = cases[i].retain;
      r->jobs[i].sampler = &r->samplers[i];
    }
    return r;
  }

  // Request i's result in a batch is its RunPrefill's alone: the same first token, visual tokens
  // per layer, KV bytes and kept tokens, or the same error.
  void ExpectAsAlone(const Requests& r, size_t i, const absl::StatusOr<PrefillResult>& got) {
    SCOPED_TRACE(r.cases[i].method + " " + r.cases[i].question);
    Sampler greedy{SamplingParams{}};
    absl::StatusOr<PrefillResult> alone =
        RunPrefill(*model_, r.prompts[i], r.encoded, r.jobs[i].prune, &greedy);
    if (!alone.ok()) {
      EXPECT_EQ(got.status(), alone.status());
      return;
    }
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->first_token, alone->first_token);
    EXPECT_EQ(got->stats.layer_visual_tokens, alone->stats.layer_visual_tokens);
    EXPECT_EQ(got->stats.kv_bytes, alone->stats.kv_bytes);
    EXPECT_EQ(got->stats.prune.kept_original, alone->stats.prune.kept_original);
  }

  // Prefill attention launches on the emulation: the scalar kernel (F32 operands) or
  // FlashAttention (BF16).
  static int64_t Attentions() {
    return cuda::emulation::KernelLaunches("AttentionKernel") +
           cuda::emulation::KernelLaunches("FlashAttentionKernel");
  }

  std::unique_ptr<LlavaModel> model_;
  std::vector<float> embeds_;
  int n_vis_ = 0;
};

TEST_P(BatchedPrefillTest, FourPromptsEqualTheirSoloPrefills) {
  ExpectBatchEqualsSolo(FourPrompts());
}

TEST_P(BatchedPrefillTest, SixOtherMethodsEqualTheirSoloPrefills) {
  ExpectBatchEqualsSolo(SixPrompts());
}

TEST_P(BatchedPrefillTest, OnePromptIsAPrefill) {
  const std::vector<Case> one = {FourPrompts()[0]};
  ExpectBatchEqualsSolo(one);
}

// RunPrefillBatch, the service's entry: each job's result is its RunPrefill's, and a job whose
// budget is refused gets its own error while the others run.
TEST_P(BatchedPrefillTest, EachRequestOfABatchGetsItsOwnResultOrError) {
  std::vector<Case> cases = FourPrompts();
  cases.insert(cases.begin() + 1, Case{"hap", 1.0, "How many shapes?"});  // below HAP's minimum
  std::unique_ptr<Requests> r = RequestsOf(cases);
  ASSERT_NE(r, nullptr);
  std::vector<absl::StatusOr<PrefillResult>> results = RunPrefillBatch(*model_, r->jobs);
  ASSERT_EQ(results.size(), cases.size());
  EXPECT_FALSE(results[1].ok());
  for (size_t i = 0; i < cases.size(); ++i) ExpectAsAlone(*r, i, results[i]);
}

// A prompt whose caller cancels leaves the pass after the layer running then: from the next
// layer on the pass processes the others' rows only (those of a pass without it), the others get
// what they get alone, and the prompt that left is marked, its output unfinished. When every
// prompt has left, the pass ends Cancelled.
TEST_P(BatchedPrefillTest, APromptCancelledInAPassLeavesIt) {
  const std::vector<Case> cases = FourPrompts();
  const std::vector<Result> solo = Solo(cases);
  const int layers = model_->config().text.num_hidden_layers;
  constexpr int kLeaves = 1;  // the prompt that leaves ("none": its rows stay the same)
  constexpr int kAfterLayer = 2;
  int polls = 0;
  const std::function<bool()> cancelled = [&polls] { return ++polls > kAfterLayer; };

  std::vector<Prepared> prepared;
  for (const Case& c : cases) prepared.push_back(Prepare(c));
  std::vector<PrefillPrompt> prompts = PromptsOf(prepared);
  prompts[kLeaves].cancelled = &cancelled;
  std::vector<int64_t> rows;
  absl::StatusOr<std::vector<PrefillOutput>> outs = PassRows(prompts, &rows);
  ASSERT_TRUE(outs.ok()) << outs.status();
  EXPECT_EQ(polls, kAfterLayer + 1);  // not polled again once it said so
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].method + " " + cases[i].question);
    EXPECT_EQ((*outs)[i].cancelled, static_cast<int>(i) == kLeaves);
    if (static_cast<int>(i) == kLeaves) continue;
    ExpectSame(Collect((*outs)[i], prepared[i].pruner.get()), solo[i]);
  }

  // The same pass without the prompt that leaves: its rows are in the batch up to the layer
  // after which it left, and from the next one the batch is exactly that pass's.
  std::vector<Prepared> others;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (static_cast<int>(i) != kLeaves) others.push_back(Prepare(cases[i]));
  }
  std::vector<int64_t> other_rows;
  ASSERT_TRUE(PassRows(PromptsOf(others), &other_rows).ok());
  ASSERT_EQ(rows.size(), static_cast<size_t>(layers));
  ASSERT_EQ(other_rows.size(), rows.size());
  for (int l = 0; l < layers; ++l) {
    if (l <= kAfterLayer) {
      EXPECT_GT(rows[l], other_rows[l]) << "layer " << l;
    } else {
      EXPECT_EQ(rows[l], other_rows[l]) << "layer " << l;
    }
  }
  EXPECT_LT(rows[kAfterLayer + 1], rows[kAfterLayer]);

  // Every prompt cancelled: the pass ends after the first layer.
  std::vector<Prepared> quitting;
  for (const Case& c : cases) quitting.push_back(Prepare(c));
  const std::function<bool()> now = [] { return true; };
  std::vector<PrefillPrompt> gone = PromptsOf(quitting);
  for (PrefillPrompt& p : gone) p.cancelled = &now;
  rows.clear();
  outs = PassRows(gone, &rows);
  EXPECT_EQ(outs.status().code(), absl::StatusCode::kCancelled) << outs.status();
  EXPECT_EQ(rows.size(), 1u);
}

// Through RunPrefillBatch, the service's entry: the job whose caller cancels gets Cancelled, the
// others their own RunPrefill's result.
TEST_P(BatchedPrefillTest, ARequestCancelledInAPassGetsCancelled) {
  const std::vector<Case> cases = FourPrompts();
  std::unique_ptr<Requests> r = RequestsOf(cases);
  ASSERT_NE(r, nullptr);
  int polls = 0;
  r->jobs[0].cancelled = [&polls] { return ++polls > 3; };  // HAP's, after layer 3
  std::vector<absl::StatusOr<PrefillResult>> results = RunPrefillBatch(*model_, r->jobs);
  ASSERT_EQ(results.size(), cases.size());
  EXPECT_EQ(results[0].status().code(), absl::StatusCode::kCancelled) << results[0].status();
  for (size_t i = 1; i < cases.size(); ++i) ExpectAsAlone(*r, i, results[i]);
}

TEST_P(BatchedPrefillTest, ABadPromptIsNamed) {
  std::vector<Prepared> prepared;
  for (int i = 0; i < 2; ++i) prepared.push_back(Prepare(FourPrompts()[i]));
  prepared[1].tokens.ids[0] = model_->config().text.vocab_size + 5;  // outside the vocabulary
  absl::StatusOr<std::vector<PrefillOutput>> outs = model_->PrefillBatch(PromptsOf(prepared));
  ASSERT_FALSE(outs.ok());
  EXPECT_EQ(outs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(outs.status().message().find("prompt 1 of 2"), std::string::npos) << outs.status();
}

INSTANTIATE_TEST_SUITE_P(Backends, BatchedPrefillTest,
                         ::testing::Values(Setup{"cpu", DType::kBF16}, Setup{"cuda", DType::kF32},
                                           Setup{"cuda", DType::kBF16}),
                         [](const auto& info) {
                           return info.param.backend + "_" +
                                  std::string(DTypeName(info.param.weights));
                         });

}  // namespace
}  // namespace hap
