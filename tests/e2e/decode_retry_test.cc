// A decode replica that is unavailable before it takes the KV cache (draining, down, gone since
// the front door last resolved its name) costs the request nothing: hap-prefill sends the cache
// to another replica. Here one of the two decode replicas refuses every call with UNAVAILABLE;
// every answer still equals `hapctl run`, and hap_decode_retries_total counts exactly the calls
// it refused.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "grpcpp/grpcpp.h"
#include "hap/v1/decode.grpc.pb.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "tests/e2e/e2e_util.h"

namespace hap::e2e {
namespace {

// hap.v1.Decode/Decode answered UNAVAILABLE at once, before reading anything.
class RefusingDecode final : public hap::v1::Decode::CallbackService {
 public:
  grpc::ServerBidiReactor<hap::v1::DecodeRequest, hap::v1::DecodeResponse>* Decode(
      grpc::CallbackServerContext*) override {
    calls.fetch_add(1);
    class Refuse final
        : public grpc::ServerBidiReactor<hap::v1::DecodeRequest, hap::v1::DecodeResponse> {
     public:
      Refuse() { Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining")); }
      void OnDone() override { delete this; }
    };
    return new Refuse;
  }
  std::atomic<int> calls{0};
};

TEST(DecodeRetryTest, AReplicaUnavailableBeforeTakingTheCacheIsReplaced) {
  const std::string model_dir = MakeTinyModel("decode_retry_tiny4", 4);
  ASSERT_FALSE(model_dir.empty()) << "hapctl make-tiny failed";
  const std::string image = ReadBytes(TestImagePath());
  Ask ask;
  ask.method = "hap";
  ask.retain = "50%";
  ask.max_new_tokens = 5;
  std::string error;
  const nlohmann::json reference = HapctlRun(model_dir, ask, &error);
  ASSERT_TRUE(error.empty()) << error;
  const std::vector<int32_t> want = reference["token_ids"].get<std::vector<int32_t>>();

  RefusingDecode refusing;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&refusing);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  sdk::LocalPipelineOptions o;
  o.model_dir = model_dir;
  o.bin_dir = HAP_BIN_DIR;
  o.echo_output = false;
  o.external_decode_addresses = {"127.0.0.1:" + std::to_string(port)};
  o.prefill_args = {"--metrics-port", "0"};
  auto pipeline = sdk::LocalPipeline::Start(o);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  auto metrics = PrefillMetricsPort(pipeline->get());
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  auto client = sdk::Client::Connect((*pipeline)->front_door());
  ASSERT_TRUE(client.ok()) << client.status();

  // One at a time: both replicas idle at each pick, so they take turns.
  for (int i = 0; i < 6; ++i) {
    auto got = (*client)->Generate(ToRequest(ask, image));
    ASSERT_TRUE(got.ok()) << "request " << i << ": " << got.status();
    EXPECT_EQ(Ids(got->stats.token_ids()), want) << "request " << i;
  }
  EXPECT_GE(refusing.calls.load(), 1) << "the refusing replica was never picked";
  EXPECT_EQ(ScrapeMetric(*metrics, "hap_decode_retries_total", /*absent=*/0),
            refusing.calls.load());
  EXPECT_TRUE(Idle(client->get()));
  server->Shutdown();
}

}  // namespace
}  // namespace hap::e2e
