// Faults and limits on a pipeline with tight settings (4 KiB-ish messages, one request at a time,
// a 1.5 s KV lease on decode): chunked transfers still match `hapctl run`, busy services say
// RESOURCE_EXHAUSTED, a stalled transfer is dropped when its lease runs out, a killed decode gives
// the client UNAVAILABLE quickly and a restarted one serves again, SIGTERM drains and exits 0.
#include <signal.h>

#include <atomic>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hap/v1/decode.grpc.pb.h"
#include "runtime/io/config.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/pipeline_fixture.h"

namespace hap::e2e {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

class FaultsTest : public PipelineSuite {
 protected:
  static void SetUpTestSuite() {
    sdk::LocalPipelineOptions o;
    const std::vector<std::string> tight = {"--max-concurrent",    "1",   "--queue-length", "0",
                                            "--max-message-bytes", "4096"};
    o.encoder_args = {"--max-message-bytes", "4096"};
    o.prefill_args = tight;
    o.decode_args = tight;
    o.decode_args.insert(o.decode_args.end(), {"--kv-lease-ms", "1500"});
    StartPipeline("faults_tiny8", 1, std::move(o));
  }
};

// A valid KV header for this model announcing 4 rows per layer, one chunk per layer.
hap::v1::DecodeRequest SmallKvHeader(const LlavaConfig& cfg) {
  hap::v1::DecodeRequest header;
  hap::v1::KvHeader* h = header.mutable_header();
  h->set_n_layers(cfg.text.num_hidden_layers);
  h->set_kv_dim(cfg.text.num_key_value_heads * cfg.text.head_dim);
  h->set_d_model(cfg.text.hidden_size);
  h->set_vocab_size(cfg.text.vocab_size);
  h->set_dtype(hap::v1::DTYPE_F32);
  for (int l = 0; l < cfg.text.num_hidden_layers; ++l) h->add_layer_rows(4);
  h->set_next_position(10);
  h->set_max_new_tokens(2);
  h->set_n_chunks(cfg.text.num_hidden_layers);
  return header;
}

TEST_F(FaultsTest, LayersSplitIntoRowChunksStillMatchHapctlRun) {
  Ask ask;
  ask.method = "pdrop";
  ask.retain = "8";
  ask.max_new_tokens = 16;
  std::string error;
  const nlohmann::json run = HapctlRun(*model_dir_, ask, &error);
  ASSERT_TRUE(error.empty()) << error;
  auto client = Connect(sdk::Service::kPrefill);
  auto got = client->Generate(ToRequest(ask, *image_));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Ids(got->stats.token_ids()), run["token_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(got->stats.kv_bytes_received(), got->stats.kv_bytes());
  // 4 KiB messages hold 6 rows of K+V here, so every layer takes several chunks.
  EXPECT_GT(got->stats.kv_chunks(), 2 * got->stats.layer_visual_tokens_size());
}

TEST_F(FaultsTest, BusyServicesSayResourceExhausted) {
  auto client = Connect(sdk::Service::kPrefill);
  auto cancel = std::make_shared<sdk::CancelToken>();
  std::atomic<bool> streaming{false};
  absl::Status first_status;
  std::thread first([&] {
    sdk::StreamOptions o;
    o.cancel = cancel;
    o.on_delta = [&](const hap::v1::TextDelta&) {
      streaming = true;
      return true;
    };
    first_status = client->Generate(ToRequest(LongAsk(), *image_), o).status();
  });
  // On a failed assertion below, stop and join the first request before the test unwinds.
  auto stop_first = absl::MakeCleanup([&] {
    cancel->Cancel();
    if (first.joinable()) first.join();
  });
  // Generous: the first token of a tiny model takes milliseconds, but CI machines can be loaded.
  ASSERT_TRUE(WaitUntil([&] { return streaming.load(); }, milliseconds(60000)).has_value());
  auto second = client->Generate(ToRequest(Ask(), *image_));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted) << second.status();
  EXPECT_NE(second.status().message().find("--max-concurrent"), std::string::npos);
  // Decode is busy with the first request too: a transfer straight to it is refused at its header.
  auto cfg = LoadLlavaConfig(*model_dir_);
  ASSERT_TRUE(cfg.ok());
  auto decode = Connect(sdk::Service::kDecode);
  auto stub = hap::v1::Decode::NewStub(decode->channel());
  grpc::ClientContext ctx;
  auto stream = stub->Decode(&ctx);
  hap::v1::DecodeRequest header = SmallKvHeader(*cfg);
  stream->Write(header);
  stream->WritesDone();
  hap::v1::DecodeResponse resp;
  while (stream->Read(&resp)) {
  }
  const grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  std::move(stop_first).Invoke();
  EXPECT_EQ(first_status.code(), absl::StatusCode::kCancelled) << first_status;
  auto prefill = Connect(sdk::Service::kPrefill);
  EXPECT_TRUE(
      WaitUntil([&] { return Idle(prefill.get()) && Idle(decode.get()); }, milliseconds(3000))
          .has_value());
}

TEST_F(FaultsTest, StalledTransferIsDroppedWhenItsLeaseRunsOut) {
  auto cfg = LoadLlavaConfig(*model_dir_);
  ASSERT_TRUE(cfg.ok());
  auto decode = Connect(sdk::Service::kDecode);
  auto before = decode->GetState();
  ASSERT_TRUE(before.ok()) << before.status();
  auto stub = hap::v1::Decode::NewStub(decode->channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub->Decode(&ctx);
  hap::v1::DecodeRequest header = SmallKvHeader(*cfg);
  header.mutable_header()->set_request_id("stalled");
  const auto t0 = Clock::now();
  ASSERT_TRUE(stream->Write(header));
  // The cache is held (leased) while the sender stalls...
  EXPECT_TRUE(WaitUntil(
                  [&] {
                    auto s = decode->GetState();
                    return s.ok() && s->kv_leases() == 1 && s->kv_caches_held() == 1;
                  },
                  milliseconds(1200))
                  .has_value());
  hap::v1::DecodeResponse resp;
  while (stream->Read(&resp)) {
  }
  const grpc::Status st = stream->Finish();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_NE(st.error_message().find("lease"), std::string::npos) << st.error_message();
  EXPECT_GE(ms, 1450);
  EXPECT_LT(ms, 5000);
  // ...and freed when the lease runs out.
  EXPECT_TRUE(WaitUntil([&] { return Idle(decode.get()); }, milliseconds(3000)).has_value());
  auto after = decode->GetState();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->leases_expired(), before->leases_expired() + 1);
}

TEST_F(FaultsTest, KilledDecodeGivesUnavailableAndARestartedOneServes) {
  auto client = Connect(sdk::Service::kPrefill);
  sdk::StreamOptions o;
  o.timeout = milliseconds(20000);
  bool killed = false;
  o.on_delta = [&](const hap::v1::TextDelta&) {
    if (!killed) {
      killed = true;
      pipeline_->Kill(sdk::Service::kDecode);
    }
    return true;
  };
  const auto t0 = Clock::now();
  auto got = client->Generate(ToRequest(LongAsk(), *image_), o);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  ASSERT_TRUE(killed);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_NE(got.status().message().find("decode"), std::string::npos) << got.status();
  EXPECT_LT(ms, 5000) << "the client waited for the dead decode service";
  std::printf("[ fault ] client saw UNAVAILABLE %.0f ms after the request started\n", ms);
  auto serving = client->IsServing();
  ASSERT_TRUE(serving.ok());
  EXPECT_TRUE(*serving) << "prefill must keep serving while decode is down";
  EXPECT_TRUE(WaitUntil([&] { return Idle(client.get()); }, milliseconds(3000)).has_value());
  // While decode is down a request fails fast with UNAVAILABLE.
  sdk::StreamOptions quick;
  quick.timeout = milliseconds(5000);
  auto down = client->Generate(ToRequest(Ask(), *image_), quick);
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable) << down.status();

  ASSERT_TRUE(pipeline_->Restart(sdk::Service::kDecode).ok());
  auto again = client->Generate(ToRequest(Ask(), *image_), quick);
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST_F(FaultsTest, SigtermDrainsTheInFlightRequestThenExitsZero) {
  auto client = Connect(sdk::Service::kPrefill);
  Ask ask = LongAsk();
  ask.max_new_tokens = 120;
  std::string error;
  const nlohmann::json run = HapctlRun(*model_dir_, ask, &error);
  ASSERT_TRUE(error.empty()) << error;
  sdk::ChildProcess* prefill = pipeline_->process(sdk::Service::kPrefill);
  std::atomic<bool> signalled{false};
  sdk::StreamOptions o;
  o.on_delta = [&](const hap::v1::TextDelta&) {
    if (!signalled.exchange(true)) prefill->Signal(SIGTERM);
    return true;
  };
  auto got = client->Generate(ToRequest(ask, *image_), o);
  ASSERT_TRUE(signalled);
  ASSERT_TRUE(got.ok()) << "the in-flight request must finish during the drain: " << got.status();
  EXPECT_EQ(Ids(got->stats.token_ids()), run["token_ids"].get<std::vector<int32_t>>());
  const std::optional<int> code = prefill->Wait(milliseconds(10000));
  ASSERT_TRUE(code.has_value()) << "hap-prefill did not exit after SIGTERM";
  EXPECT_EQ(*code, 0);
}

}  // namespace
}  // namespace hap::e2e
