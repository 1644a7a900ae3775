// hap-prefill chooses the decode replica by the free KV memory the replicas report
// (--decode-poll-ms): with one replica whose pool holds about one request and one with room for
// dozens, sequential requests go (nearly) all to the large one, where fewest-in-flight alone
// would alternate; every answer equals the one `hapctl run` gives.
#include <thread>

#include "gtest/gtest.h"
#include "runtime/io/config.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "tests/e2e/e2e_util.h"

namespace hap::e2e {
namespace {

TEST(KvRoutingTest, SequentialRequestsGoToTheReplicaWithTheMostFreeKv) {
  const std::string model_dir = MakeTinyModel("kv_routing_tiny8", 7);
  ASSERT_FALSE(model_dir.empty()) << "hapctl make-tiny failed";
  const std::string image = ReadBytes(TestImagePath());
  const Ask ask{.method = "hap", .retain = "50%", .max_new_tokens = 6};
  std::string error;
  const nlohmann::json reference = HapctlRun(model_dir, ask, &error);
  ASSERT_TRUE(error.empty()) << error;
  const std::vector<int32_t> want = reference["token_ids"].get<std::vector<int32_t>>();
  const int prompt = reference["pruning"]["prompt_tokens"].get<int>();
  auto cfg = LoadLlavaConfig(model_dir);
  ASSERT_TRUE(cfg.ok());
  // Blocks of 16 rows; a request holds at most its prompt's rows plus max_new_tokens per layer.
  const int64_t block_bytes =
      int64_t{2} * 16 * cfg->text.num_key_value_heads * cfg->text.head_dim * 4;
  const int64_t per_request =
      int64_t{cfg->text.num_hidden_layers} * ((prompt + ask.max_new_tokens + 15) / 16);
  const int64_t small_pool = (per_request + per_request / 2) * block_bytes;  // 1.5 requests
  const int64_t large_pool = 40 * per_request * block_bytes;

  sdk::LocalPipelineOptions o;
  o.model_dir = model_dir;
  o.bin_dir = HAP_BIN_DIR;
  o.echo_output = false;
  o.decode_replicas = 2;
  o.encoder_args = {"--max-concurrent", "4", "--queue-length", "8"};
  o.prefill_args = {"--max-concurrent", "4", "--queue-length", "8", "--decode-poll-ms", "50"};
  o.decode_args = {"--max-concurrent", "4", "--queue-length", "8", "--kv-block-rows", "16"};
  // The small pool on the first replica: the in-turn tie-break starts there.
  o.decode_replica_args = {{"--kv-pool-bytes", std::to_string(small_pool)},
                           {"--kv-pool-bytes", std::to_string(large_pool)}};
  auto pipeline = sdk::LocalPipeline::Start(o);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  const std::vector<std::string> decodes = (*pipeline)->decode_addresses();
  ASSERT_EQ(decodes.size(), 2u);
  std::vector<std::unique_ptr<sdk::Client>> decode_clients;
  for (const std::string& address : decodes) {
    auto d = sdk::Client::Connect(address);
    ASSERT_TRUE(d.ok()) << d.status();
    decode_clients.push_back(std::move(*d));
  }
  auto small = decode_clients[0]->GetState();
  auto large = decode_clients[1]->GetState();
  ASSERT_TRUE(small.ok() && large.ok());
  EXPECT_EQ(small->kv_pool_blocks_total(), per_request + per_request / 2);
  EXPECT_EQ(large->kv_pool_blocks_total(), 40 * per_request);
  // Prefill polls every 50 ms: a few rounds have answered by now.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));

  constexpr int kRequests = 10;
  auto client = sdk::Client::Connect((*pipeline)->front_door());
  ASSERT_TRUE(client.ok()) << client.status();
  int good = 0;
  for (int i = 0; i < kRequests; ++i) {
    auto got = (*client)->Generate(ToRequest(ask, image));
    ASSERT_TRUE(got.ok()) << "request " << i << ": " << got.status();
    EXPECT_EQ(Ids(got->stats.token_ids()), want) << "request " << i;
    if (Ids(got->stats.token_ids()) == want) ++good;
  }
  EXPECT_EQ(good, kRequests);

  auto small_after = decode_clients[0]->GetState();
  auto large_after = decode_clients[1]->GetState();
  ASSERT_TRUE(small_after.ok() && large_after.ok());
  EXPECT_EQ(small_after->requests_total() + large_after->requests_total(), kRequests);
  EXPECT_GE(large_after->requests_total(), kRequests * 8 / 10)
      << "small-pool replica served " << small_after->requests_total();
  EXPECT_EQ(small_after->kv_pool_blocks_in_use(), 0);
  EXPECT_EQ(large_after->kv_pool_blocks_in_use(), 0);
  EXPECT_TRUE((*pipeline)->Stop().ok());
}

}  // namespace
}  // namespace hap::e2e
