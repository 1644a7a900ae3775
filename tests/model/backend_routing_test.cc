// The model runs every op through the backend it is given (ModelOptions::backend): a backend
// that counts and forwards to the CPU one gives bit-identical results, and a decode step makes
// exactly the calls its layers need — no op reaches a kernel around the interface (VisionZip's
// compression included).
#include <string>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "runtime/image/png_encode.h"
#include "runtime/model/pipeline.h"
#include "runtime/prune/planner.h"
#include "runtime/tiny/tiny_model.h"
#include "tests/common/tiny_checkpoint.h"
#include "tests/model/counting_backend.h"

namespace hap {
namespace {

using testing_support::CountingBackend;

TEST(BackendRouting, EveryOpGoesThroughTheGivenBackend) {
  const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/model/backend_routing";
  const TinyModelOptions o = testing_support::TinyOptions(9, 4, 112);
  ASSERT_TRUE(WriteTinyModel(o, dir).ok());
  CountingBackend counting;
  ModelOptions with;
  with.backend = &counting;
  auto cpu_model = LlavaModel::Load(dir, {});
  auto counted_model = LlavaModel::Load(dir, with);
  ASSERT_TRUE(cpu_model.ok() && counted_model.ok());
  EXPECT_EQ((*counted_model)->backend().name(), "counting");

  const std::string png =
      testing_support::SyntheticPng(64, 64, [](size_t i) { return (i * 31) % 251; }).value();
  PruneRequest prune;
  prune.method = "hap";
  prune.retain = 32;
  // HAP's plan for that budget: the layers of every group but the last score the text-visual
  // attention once each, and each of those groups ends in one top-k.
  const absl::StatusOr<Plan> plan =
      MakePlan(DimsOf((*counted_model)->config()), Budget::Retain(*prune.retain));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GE(plan->M, 2) << "the budget should prune on the tiny model";
  const int scored_layers = plan->groups[plan->M - 1].first_layer;

  struct Run {
    PrefillResult prefill;
    std::vector<float> step;
  };
  auto run = [&](const LlavaModel& model) {
    auto encoded = EncodeImage(model, png, prune);
    EXPECT_TRUE(encoded.ok()) << encoded.status();
    Sampler sampler{SamplingParams{}};
    auto prefill = RunPrefill(model, "What is in the picture?", *encoded, prune, &sampler);
    EXPECT_TRUE(prefill.ok()) << prefill.status();
    Run r{std::move(*prefill), {}};
    auto step = model.DecodeStep(r.prefill.first_token, &r.prefill.cache);
    EXPECT_TRUE(step.ok()) << step.status();
    r.step = std::move(*step);
    return r;
  };
  const Run plain = run(**cpu_model);
  // The prefill's pruning ran through the backend too (checked before the decode step resets).
  Run counted = [&] {
    auto encoded = EncodeImage(**counted_model, png, prune);
    EXPECT_TRUE(encoded.ok());
    // The vision layers up to the feature layer (-2 of 2: one), each with q, k, v, o, fc1 and
    // fc2; the patch embedding; the projector's two products.
    EXPECT_EQ(counting.count("Attention"), o.vision_layers - 1);
    EXPECT_EQ(counting.count("Linear"), 6 * (o.vision_layers - 1) + 1 + 2);
    counting.Reset();
    Sampler sampler{SamplingParams{}};
    auto prefill =
        RunPrefill(**counted_model, "What is in the picture?", *encoded, prune, &sampler);
    EXPECT_TRUE(prefill.ok());
    EXPECT_EQ(counting.count("Attention"), o.layers);
    EXPECT_EQ(counting.count("TextVisualAttention"), scored_layers);
    EXPECT_EQ(counting.count("StableTopK"), plan->M - 1);
    EXPECT_EQ(counting.count("GatherRows"), 2 * counting.count("StableTopK"));
    // One planned step for the layers before the first pruning stage, one after each stage.
    EXPECT_EQ(counting.count("Plan"), 1 + counting.count("StableTopK"));
    // A backend in host memory: the first token is sampled from the logits in place.
    EXPECT_EQ(counting.count("ArgMaxRows") + counting.count("TopLogits"), 0);
    EXPECT_EQ(prefill->first_token_sampling.host, 1);
    counting.Reset();
    Run r{std::move(*prefill), {}};
    auto step = (*counted_model)->DecodeStep(r.prefill.first_token, &r.prefill.cache);
    EXPECT_TRUE(step.ok());
    r.step = std::move(*step);
    return r;
  }();
  EXPECT_EQ(plain.prefill.first_token, counted.prefill.first_token);
  EXPECT_EQ(plain.step, counted.step);  // bit for bit

  // One decode step: per layer q, k, v, o, gate, up, down and the LM head; two norms per layer
  // and the final one; RoPE on q and k; two residual adds; one SiLU·up; one attention.
  const int L = o.layers;
  EXPECT_EQ(counting.count("Linear"), 7 * L + 1);
  EXPECT_EQ(counting.count("RmsNorm"), 2 * L + 1);
  EXPECT_EQ(counting.count("Rope"), 2 * L);
  EXPECT_EQ(counting.count("Add"), 2 * L);
  EXPECT_EQ(counting.count("SiluMul"), L);
  EXPECT_EQ(counting.count("DecodeAttention"), L);
  EXPECT_EQ(counting.count("Attention"), 0);
  EXPECT_EQ(counting.count("Embedding"), 1);
  // The step was planned once; the next step of one sequence reuses that plan, ops and all.
  EXPECT_EQ(counting.count("Plan"), 1);
  counting.Reset();
  auto next = (*counted_model)->DecodeStep(counted.prefill.first_token, &counted.prefill.cache);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(counting.count("Plan"), 0);
  EXPECT_EQ(counting.count("Linear"), 7 * L + 1);
  EXPECT_EQ(counting.count("DecodeAttention"), L);

  // VisionZip compresses the feature layer on the backend: one CLS attention row per head, its
  // sum over heads, one top-k, the dominant rows gathered, one merge; bit-identical features.
  PruneRequest zip;
  zip.method = "visionzip";
  zip.retain = 24;
  counting.Reset();
  auto zip_counted = EncodeImage(**counted_model, png, zip);
  ASSERT_TRUE(zip_counted.ok()) << zip_counted.status();
  EXPECT_EQ(counting.count("TextVisualAttention"), 1);
  EXPECT_EQ(counting.count("WeightedSumContiguous"), 1);
  EXPECT_EQ(counting.count("StableTopK"), 1);
  EXPECT_EQ(counting.count("GatherRows"), 1);
  EXPECT_EQ(counting.count("VisionZipMerge"), 1);
  auto zip_plain = EncodeImage(**cpu_model, png, zip);
  ASSERT_TRUE(zip_plain.ok()) << zip_plain.status();
  EXPECT_EQ(zip_counted->n_vis, 24);
  EXPECT_EQ(zip_plain->embeds, zip_counted->embeds);
}

}  // namespace
}  // namespace hap
