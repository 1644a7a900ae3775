// Scale-out and the decode KV pool through the services. One hap-prefill with three hap-decode
// replicas on loopback. Prefill spreads the
// calls over every replica it was given (their pools are alike, so by the KV it sent each since
// their last reports, then fewest in flight, ties in turn), so 24 requests
// from four concurrent clients leave every replica with at least 5; each answer equals the one
// `hapctl run` gives.
#include <atomic>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"
#include "runtime/io/config.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "tests/e2e/e2e_util.h"

namespace hap::e2e {
namespace {

TEST(ScaleOutTest, PrefillSpreadsRequestsOverEveryDecodeReplica) {
  const std::string model_dir = MakeTinyModel("scale_out_tiny8", 4);
  ASSERT_FALSE(model_dir.empty()) << "hapctl make-tiny failed";
  const std::string image = ReadBytes(TestImagePath());
  const Ask ask{.method = "hap", .retain = "50%", .max_new_tokens = 6};
  std::string error;
  const std::vector<int32_t> want = HapctlTokenIds(model_dir, ask, &error);
  ASSERT_TRUE(error.empty()) << error;

  sdk::LocalPipelineOptions o;
  o.model_dir = model_dir;
  o.bin_dir = HAP_BIN_DIR;
  o.echo_output = false;
  o.decode_replicas = 3;
  const std::vector<std::string> limits = {"--max-concurrent", "8", "--queue-length", "32"};
  o.encoder_args = o.decode_args = o.prefill_args = limits;
  auto pipeline = sdk::LocalPipeline::Start(o);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  const std::vector<std::string> decodes = (*pipeline)->decode_addresses();
  ASSERT_EQ(decodes.size(), 3u);

  constexpr int kClients = 4, kPerClient = 6;
  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<int> good{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&] {
      auto client = sdk::Client::Connect((*pipeline)->front_door());
      for (int i = 0; i < kPerClient; ++i) {
        auto got = client.ok() ? (*client)->Generate(ToRequest(ask, image))
                               : absl::StatusOr<sdk::GenerateResult>(client.status());
        std::lock_guard<std::mutex> lock(mu);
        if (!got.ok()) {
          failures.push_back(got.status().ToString());
        } else if (Ids(got->stats.token_ids()) != want) {
          failures.push_back("answer differs from hapctl run");
        } else {
          ++good;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " failed, first: " << failures.front();
  EXPECT_EQ(good.load(), kClients * kPerClient);

  int64_t total = 0;
  for (const std::string& address : decodes) {
    auto d = sdk::Client::Connect(address);
    ASSERT_TRUE(d.ok());
    auto state = (*d)->GetState();
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_GE(state->requests_total(), 5) << address;
    total += state->requests_total();
  }
  EXPECT_EQ(total, kClients * kPerClient);
  EXPECT_TRUE((*pipeline)->Stop().ok());
}

// hap-decode's KV pool, sized for one request at a time: four concurrent requests wait for
// blocks in turn and all answer as `hapctl run` does; a request that needs more blocks than the
// whole pool gets RESOURCE_EXHAUSTED; afterwards no block is held and the services still serve.
TEST(DecodePoolTest, QueuesWhenFullRefusesWhatCannotFitAndHoldsNothingAfter) {
  const std::string model_dir = MakeTinyModel("pool_tiny8", 6);
  ASSERT_FALSE(model_dir.empty()) << "hapctl make-tiny failed";
  const std::string image = ReadBytes(TestImagePath());
  Ask ask;
  ask.max_new_tokens = 6;
  std::string error;
  const nlohmann::json reference = HapctlRun(model_dir, ask, &error);
  ASSERT_TRUE(error.empty()) << error;
  const int prompt = reference["pruning"]["prompt_tokens"].get<int>();
  auto cfg = LoadLlavaConfig(model_dir);
  ASSERT_TRUE(cfg.ok());
  const int layers = cfg->text.num_hidden_layers;
  const int64_t block_bytes =
      int64_t{2} * 16 * cfg->text.num_key_value_heads * cfg->text.head_dim * 4;
  const int64_t per_request = int64_t{layers} * ((prompt + ask.max_new_tokens + 15) / 16);
  const int64_t pool_bytes = (per_request + per_request / 2) * block_bytes;  // 1.5 requests

  sdk::LocalPipelineOptions o;
  o.model_dir = model_dir;
  o.bin_dir = HAP_BIN_DIR;
  o.echo_output = false;
  o.encoder_args = o.prefill_args = {"--max-concurrent", "4", "--queue-length", "8"};
  o.decode_args = {
      "--max-concurrent", "4", "--queue-length", "8", "--kv-pool-bytes", std::to_string(pool_bytes),
      "--kv-block-rows",  "16"};
  auto pipeline = sdk::LocalPipeline::Start(o);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  auto decode = sdk::Client::Connect((*pipeline)->address(sdk::Service::kDecode));
  ASSERT_TRUE(decode.ok());
  auto before = (*decode)->GetState();
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->kv_pool_blocks_total(), per_request + per_request / 2);
  EXPECT_EQ(before->kv_pool_block_bytes(), block_bytes);

  const std::vector<int32_t> want = reference["token_ids"].get<std::vector<int32_t>>();
  std::vector<std::thread> clients;
  std::atomic<int> same{0};
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&] {
      auto client = sdk::Client::Connect((*pipeline)->front_door());
      if (!client.ok()) return;
      auto got = (*client)->Generate(ToRequest(ask, image));
      if (got.ok() && Ids(got->stats.token_ids()) == want) ++same;
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(same.load(), 4);

  Ask huge = ask;
  huge.max_new_tokens = 16 * static_cast<int>(per_request);
  auto client = sdk::Client::Connect((*pipeline)->front_door());
  ASSERT_TRUE(client.ok());
  auto refused = (*client)->Generate(ToRequest(huge, image));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();

  auto after = (*decode)->GetState();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->kv_pool_blocks_in_use(), 0);
  EXPECT_EQ(after->kv_pool_blocks_peak(), per_request);  // one request's blocks at a time
  auto again = (*client)->Generate(ToRequest(ask, image));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Ids(again->stats.token_ids()), want);
  EXPECT_TRUE((*pipeline)->Stop().ok());
}

}  // namespace
}  // namespace hap::e2e
