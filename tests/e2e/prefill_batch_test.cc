// hap-prefill --prefill-batch-tokens: requests sent at once, with different pruning methods,
// budgets and prompts, are prefilled in shared passes, and each answer equals `hapctl run`'s token
// for token, with the same visual tokens per layer and KV bytes (a BF16 checkpoint: the CPU's BF16
// products give a row the same result whatever rows share the pass). The front door counts its
// passes on /metrics, and holds nothing afterwards. With a budget below every prompt's length, each
// prompt runs alone in sliced passes, with the same answers.
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "tests/e2e/e2e_util.h"

namespace hap::e2e {
namespace {

// Eight requests of different methods sent at once through a prefill batching up to
// `batch_tokens` prompt tokens a pass: each answer equals `hapctl run`'s.
void ExpectBatchedAnswersEqualRuns(const std::string& batch_tokens) {
  const std::string model = MakeTinyModel("prefill_batch_tiny8_bf16", 5, "bf16");
  ASSERT_FALSE(model.empty());
  sdk::LocalPipelineOptions o;
  o.model_dir = model;
  o.bin_dir = HAP_BIN_DIR;
  o.echo_output = false;
  o.prefill_args = {"--prefill-batch-tokens", batch_tokens, "--metrics-port", "0",
                    "--max-concurrent",       "16"};
  o.encoder_args = o.decode_args = {"--max-concurrent", "16"};
  auto pipeline = sdk::LocalPipeline::Start(o);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  auto metrics_port = PrefillMetricsPort(pipeline->get());
  ASSERT_TRUE(metrics_port.ok()) << metrics_port.status();
  const std::string address = (*pipeline)->front_door();

  const std::vector<std::pair<std::string, std::string>> methods = {
      {"none", ""},       {"hap", "8"},      {"fastv", "12"}, {"pdrop", "10"},
      {"uniform", "50%"}, {"divprune", "8"}, {"hap", "25%"},  {"dart", "12"}};
  const std::vector<std::string> prompts = {"What is in the picture?", "Describe the scene.",
                                            "How many objects are there in this picture?"};
  std::vector<Ask> asks;
  for (size_t i = 0; i < methods.size(); ++i) {
    Ask a;
    a.method = methods[i].first;
    a.retain = methods[i].second;
    a.prompt = prompts[i % prompts.size()];
    a.max_new_tokens = 8;
    asks.push_back(a);
  }
  const std::string image = ReadBytes(TestImagePath());
  const double passes_before = ScrapeMetric(*metrics_port, "hap_prefill_passes_total", 0);
  const double yields_before = ScrapeMetric(*metrics_port, "hap_prefill_yields_total", 0);
  std::vector<std::future<absl::StatusOr<sdk::GenerateResult>>> calls;
  for (const Ask& a : asks) {
    calls.push_back(std::async(std::launch::async, [&address, &image, a] {
      absl::StatusOr<std::unique_ptr<sdk::Client>> client = sdk::Client::Connect(address);
      if (!client.ok()) return absl::StatusOr<sdk::GenerateResult>(client.status());
      return (*client)->Generate(ToRequest(a, image));
    }));
  }
  std::vector<absl::StatusOr<sdk::GenerateResult>> got;
  for (auto& c : calls) got.push_back(c.get());
  const double passes = ScrapeMetric(*metrics_port, "hap_prefill_passes_total", 0) - passes_before;
  const double yields = ScrapeMetric(*metrics_port, "hap_prefill_yields_total", 0) - yields_before;
  std::printf("%zu requests prefilled in %.0f passes, which handed the compute on %.0f times\n",
              asks.size(), passes, yields);
  EXPECT_GE(passes, 1);
  EXPECT_LE(passes, static_cast<double>(asks.size()));
  for (size_t i = 0; i < asks.size(); ++i) {
    SCOPED_TRACE(absl::StrCat(asks[i].method, " ", asks[i].retain, " ", asks[i].prompt));
    ASSERT_TRUE(got[i].ok()) << got[i].status();
    std::string error;
    const nlohmann::json run = HapctlRun(model, asks[i], &error);
    ASSERT_TRUE(error.empty()) << error;
    const hap::v1::GenerateStats& s = got[i]->stats;
    EXPECT_EQ(Ids(s.token_ids()), run["token_ids"].get<std::vector<int32_t>>());
    const nlohmann::json& pr = run["pruning"];
    EXPECT_EQ(Ids(s.layer_visual_tokens()), pr["layer_visual_tokens"].get<std::vector<int32_t>>());
    EXPECT_EQ(s.kv_bytes(), pr["kv_bytes"].get<int64_t>());
  }
  auto client = sdk::Client::Connect(address);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE(Idle(client->get()));
}

TEST(PrefillBatchTest, RequestsSentTogetherAnswerAsEachAlone) {
  ExpectBatchedAnswersEqualRuns("100000");
}

// Every prompt is longer than the budget: each runs alone, in slices of 8 tokens' work that
// hand the compute to the passes queued behind it, and still answers as it does alone.
TEST(PrefillBatchTest, PromptsLongerThanTheBudgetRunInSlices) {
  ExpectBatchedAnswersEqualRuns("8");
}

}  // namespace
}  // namespace hap::e2e
