// Scale-out: one hap-prefill with three hap-decode replicas on loopback. Prefill spreads the
// calls over every replica it was given (fewest in flight first, ties in turn), so 24 requests
// from four concurrent clients leave every replica with at least 5; each answer equals the one
// `hapctl run` gives.
#include <atomic>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "tests/e2e/e2e_util.h"

namespace hap::e2e {
namespace {

TEST(ScaleOutTest, PrefillSpreadsRequestsOverEveryDecodeReplica) {
  const std::string model_dir = MakeTinyModel("scale_out_tiny8", 4);
  ASSERT_FALSE(model_dir.empty()) << "hapctl make-tiny failed";
  const std::string image = ReadBytes(TestImagePath());
  Ask ask;
  ask.method = "hap";
  ask.retain = "50%";
  ask.max_new_tokens = 6;
  std::string error;
  const nlohmann::json reference = HapctlRun(model_dir, ask, &error);
  ASSERT_TRUE(error.empty()) << error;
  const std::vector<int32_t> want = reference["token_ids"].get<std::vector<int32_t>>();

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

}  // namespace
}  // namespace hap::e2e
