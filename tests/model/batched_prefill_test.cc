// Batched prefill (LlamaDecoder::PrefillBatchInto through LlavaModel::PrefillBatch): prompts of
// different lengths, pruning methods and budgets prefilled in one pass get what each gets alone —
// the same kept visual tokens at every stage, the same KV rows (F32) and positions in every layer
// and the same last-row logits, bit for bit — on the CUDA backend executed by the SIMT emulation,
// F32 checkpoints (the scalar attention kernel) and BF16 ones (FlashAttention), and on the CPU
// backend with BF16 weights, whose prefill products (Bf16Gemm) give a row the same result whatever
// the rows beside it (OpenBLAS's F32 sgemm picks its kernels by shape). On the emulation the pass
// makes one attention launch per layer for the whole batch.
#include <cstring>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/emulation_counts.h"
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
    std::vector<Result> solo;
    for (const Case& c : cases) {
      Prepared p = Prepare(c);
      absl::StatusOr<PrefillOutput> out = model_->Prefill(p.tokens, p.embeds, p.pruner.get());
      ASSERT_TRUE(out.ok()) << c.method << ": " << out.status();
      solo.push_back(Collect(*out, p.pruner.get()));
    }
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
      const Result batched = Collect((*outs)[i], prepared[i].pruner.get());
      const Result& alone = solo[i];
      EXPECT_EQ(batched.stages, alone.stages);
      pruned = pruned || !alone.stages.empty();
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
      EXPECT_EQ(std::memcmp(batched.logits.data(), alone.logits.data(), 4 * alone.logits.size()),
                0);
    }
    EXPECT_TRUE(pruned);
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
  PruneRequest none;
  none.method = "none";
  auto encoded = EncodeImage(*model_, hap::testing::PatternPng(), none);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  std::vector<Case> cases = FourPrompts();
  cases.insert(cases.begin() + 1, Case{"hap", 1.0, "How many shapes?"});  // below HAP's minimum
  std::vector<PromptText> prompts;
  for (const Case& c : cases) prompts.emplace_back(c.question);
  std::vector<Sampler> samplers(cases.size(), Sampler{SamplingParams{}});
  std::vector<PrefillJob> jobs(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    jobs[i].prompt = &prompts[i];
    jobs[i].encoded = &*encoded;
    jobs[i].prune.method = cases[i].method;
    jobs[i].prune.retain = cases[i].retain;
    jobs[i].sampler = &samplers[i];
  }
  std::vector<absl::StatusOr<PrefillResult>> results = RunPrefillBatch(*model_, jobs);
  ASSERT_EQ(results.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].method + " " + cases[i].question);
    Sampler greedy{SamplingParams{}};
    absl::StatusOr<PrefillResult> alone =
        RunPrefill(*model_, prompts[i], *encoded, jobs[i].prune, &greedy);
    if (i == 1) {
      ASSERT_FALSE(results[i].ok());
      EXPECT_EQ(results[i].status(), alone.status());
      continue;
    }
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    ASSERT_TRUE(alone.ok()) << alone.status();
    EXPECT_EQ(results[i]->first_token, alone->first_token);
    EXPECT_EQ(results[i]->stats.layer_visual_tokens, alone->stats.layer_visual_tokens);
    EXPECT_EQ(results[i]->stats.kv_bytes, alone->stats.kv_bytes);
    EXPECT_EQ(results[i]->stats.prune.kept_original, alone->stats.prune.kept_original);
  }
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
