// A peer replica that is unavailable before anything of the request reached it or came back
// (draining, down, gone since the front door last resolved its name) costs the request nothing:
// hap-prefill asks another replica. Here one of two encoder replicas, or one of two decode
// replicas, refuses every call with UNAVAILABLE; every answer still equals `hapctl run`, and
// hap_peer_retries_total{peer} counts exactly the calls it refused.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "hap/v1/decode.grpc.pb.h"
#include "hap/v1/encoder.grpc.pb.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "tests/e2e/e2e_util.h"

namespace hap::e2e {
namespace {

// hap.v1.Decode/Decode answered UNAVAILABLE at once, before reading anything.
class RefusingDecode final : public hap::v1::Decode::Service {
 public:
  grpc::Status Decode(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<hap::v1::DecodeResponse, hap::v1::DecodeRequest>*) override {
    calls.fetch_add(1);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining");
  }
  std::atomic<int> calls{0};
};

// hap.v1.Encoder/Encode answered UNAVAILABLE at once, before sending anything.
class RefusingEncoder final : public hap::v1::Encoder::Service {
 public:
  grpc::Status Encode(grpc::ServerContext*, const hap::v1::EncodeRequest*,
                      grpc::ServerWriter<hap::v1::EncodeResponse>*) override {
    calls.fetch_add(1);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining");
  }
  std::atomic<int> calls{0};
};

// A gRPC server on a loopback port for `service`.
class FakeReplica {
 public:
  explicit FakeReplica(grpc::Service* service) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
  }
  ~FakeReplica() {
    if (server_ != nullptr) server_->Shutdown();
  }
  bool ok() const { return server_ != nullptr; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// Six requests one at a time through a pipeline whose prefill also has the replicas in `o`'s
// external addresses: each answer equals `hapctl run`; the prefill's retries of `peer`.
void ServeSix(const std::string& model_dir, sdk::LocalPipelineOptions o, const std::string& peer,
              const std::atomic<int>& refused) {
  const std::string image = ReadBytes(TestImagePath());
  const Ask ask{.method = "hap", .retain = "50%", .max_new_tokens = 5};
  std::string error;
  const std::vector<int32_t> want = HapctlTokenIds(model_dir, ask, &error);
  ASSERT_TRUE(error.empty()) << error;

  o.model_dir = model_dir;
  o.bin_dir = HAP_BIN_DIR;
  o.echo_output = false;
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
  EXPECT_GE(refused.load(), 1) << "the refusing replica was never picked";
  EXPECT_EQ(ScrapeMetric(*metrics, "hap_peer_retries_total{peer=\"" + peer + "\"}", -1),
            refused.load());
  const std::string other = peer == "decode" ? "encoder" : "decode";
  EXPECT_EQ(ScrapeMetric(*metrics, "hap_peer_retries_total{peer=\"" + other + "\"}", -1), 0);
  EXPECT_TRUE(Idle(client->get()));
}

TEST(PeerRetryTest, ADecodeReplicaUnavailableBeforeTakingTheCacheIsReplaced) {
  const std::string model_dir = MakeTinyModel("peer_retry_decode_tiny4", 4);
  ASSERT_FALSE(model_dir.empty()) << "hapctl make-tiny failed";
  RefusingDecode refusing;
  FakeReplica fake(&refusing);
  ASSERT_TRUE(fake.ok());
  sdk::LocalPipelineOptions o;
  o.external_decode_addresses = {fake.address()};
  ServeSix(model_dir, o, "decode", refusing.calls);
}

TEST(PeerRetryTest, AnEncoderReplicaUnavailableBeforeAnsweringIsReplaced) {
  const std::string model_dir = MakeTinyModel("peer_retry_encoder_tiny4", 4);
  ASSERT_FALSE(model_dir.empty()) << "hapctl make-tiny failed";
  RefusingEncoder refusing;
  FakeReplica fake(&refusing);
  ASSERT_TRUE(fake.ok());
  sdk::LocalPipelineOptions o;
  o.external_encoder_addresses = {fake.address()};
  ServeSix(model_dir, o, "encoder", refusing.calls);
}

}  // namespace
}  // namespace hap::e2e
