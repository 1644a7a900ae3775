// A client that stops reading its Generate stream, with a real HTTP/2 window: a raw gRPC client
// with a 1 KiB receive window (no BDP growth) reads one message and then nothing. Its window
// fills, the front door's outbox fills to --max-stream-queue, and the front door cuts the call
// off. What a user should expect, and what is checked:
// - the server gives up on its own, within a bound, without waiting for the client to read again:
//   decode is cancelled and the request, its KV cache, lease and pool blocks are freed while the
//   client is still stalled (hap_slow_client_cutoffs_total and the RESOURCE_EXHAUSTED count move
//   by one);
// - when the client reads again it gets what was already in its window (the beginning of its
//   answer, in order) and then RESOURCE_EXHAUSTED saying it stopped reading;
// - other clients, on their own connections and on the stalled client's connection, are served
//   with their `hapctl run` answers and their usual latency meanwhile;
// - health stays SERVING and the pipeline serves again.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "base/timer.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "hap/v1/generate.grpc.pb.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/pipeline_fixture.h"

namespace hap::e2e {
namespace {

using std::chrono::milliseconds;

// Low enough that the stalled stream overflows long before its answer ends (its window holds
// about 70 token messages, so it is cut off near 140 tokens of a 400+ token answer); higher
// than any whole answer of the other clients (12 tokens + the stats), which therefore can never
// be cut off however the machine schedules them.
constexpr int kMaxStreamQueue = 64;
// The stalled client's HTTP/2 stream window: what its transport accepts before the app reads.
constexpr int kWindowBytes = 1024;

class SlowClientTest : public PipelineSuite {
 protected:
  static void SetUpTestSuite() {
    sdk::LocalPipelineOptions o;
    o.prefill_args = {"--max-stream-queue", std::to_string(kMaxStreamQueue), "--metrics-port", "0"};
    StartPipeline("slow_client_tiny8", 5, std::move(o));
    if (HasFatalFailure()) return;
    absl::StatusOr<int> port = PrefillMetricsPort(pipeline_);
    ASSERT_TRUE(port.ok()) << port.status();
    metrics_port_ = *port;
  }
  static void TearDownTestSuite() {
    // The services exit cleanly after a client was cut off.
    if (pipeline_ != nullptr) {
      EXPECT_TRUE(pipeline_->Stop().ok());
    }
    PipelineSuite::TearDownTestSuite();
  }

  // Nothing in flight and no KV cache, lease or pool block held (e2e_util's check).
  static bool HoldsNothing(sdk::Service s) { return Idle(pipeline_->address(s)); }

  static bool InFlight(const std::string& request_id) {
    auto st = Connect(sdk::Service::kPrefill)->GetState(milliseconds(1000));
    if (!st.ok()) return true;
    return std::find(st->in_flight_ids().begin(), st->in_flight_ids().end(), request_id) !=
           st->in_flight_ids().end();
  }

  // One sample of prefill's /metrics; 0 when the series has no sample yet, -1 on failure.
  static double Metric(const std::string& series) {
    return ScrapeMetric(metrics_port_, series, /*absent=*/0);
  }

  static int metrics_port_;
};
int SlowClientTest::metrics_port_ = 0;

const char kCutoffs[] = "hap_slow_client_cutoffs_total";
const char kExhausted[] =
    "hap_requests_total{rpc=\"hap.v1.Generation/Generate\",code=\"RESOURCE_EXHAUSTED\"}";

TEST_F(SlowClientTest, AClientThatStopsReadingIsCutOffAndOthersAreServed) {
  // The stalled client's request: sampled, 400+ tokens unless stopped; its answer from hapctl run.
  const Ask long_ask = LongAsk();
  std::string error;
  const nlohmann::json long_run = HapctlRun(*model_dir_, long_ask, &error);
  ASSERT_TRUE(error.empty()) << error;
  const std::vector<int32_t> long_ids = long_run["token_ids"].get<std::vector<int32_t>>();
  ASSERT_GE(long_ids.size(), 400u);
  // The other clients' request and answer, and its latency with the pipeline to itself.
  const Ask short_ask;
  const nlohmann::json short_run = HapctlRun(*model_dir_, short_ask, &error);
  ASSERT_TRUE(error.empty()) << error;
  const std::vector<int32_t> short_ids = short_run["token_ids"].get<std::vector<int32_t>>();
  auto client = Connect(sdk::Service::kPrefill);
  double solo_ms = 0;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    auto got = client->Generate(ToRequest(short_ask, *image_));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(Ids(got->stats.token_ids()), short_ids);
    solo_ms = std::max(solo_ms, MsSince(t0));
  }
  const double cutoffs_before = Metric(kCutoffs);
  const double exhausted_before = Metric(kExhausted);
  ASSERT_GE(cutoffs_before, 0);
  ASSERT_GE(exhausted_before, 0);

  // The slow client: a channel with a small stream window and no BDP probing, so its window
  // stays at kWindowBytes while it does not read.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kWindowBytes);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  std::shared_ptr<grpc::Channel> slow_channel =
      grpc::CreateCustomChannel(pipeline_->front_door(), grpc::InsecureChannelCredentials(), args);
  auto slow_stub = hap::v1::Generation::NewStub(slow_channel);

  // Other clients, from before the slow one starts until after it is cut off: two on their own
  // connections (the SDK) and one on the slow client's connection (HTTP/2 multiplexing: its
  // stalled stream must not hold the connection's window).
  std::atomic<bool> stop{false};
  struct Served {
    int ok = 0;
    std::vector<std::string> failures;
    double worst_ms = 0;
  };
  std::vector<Served> served(3);
  std::vector<std::thread> others;
  for (int c = 0; c < 3; ++c) {
    others.emplace_back([&, c] {
      std::unique_ptr<sdk::Client> own = c < 2 ? Connect(sdk::Service::kPrefill) : nullptr;
      auto shared_stub = hap::v1::Generation::NewStub(slow_channel);
      Served& s = served[c];
      while (!stop.load() || s.ok < 2) {
        const auto t0 = Clock::now();
        std::vector<int32_t> ids;
        std::string failure;
        if (own != nullptr) {
          sdk::StreamOptions o;
          o.timeout = milliseconds(30000);
          auto got = own->Generate(ToRequest(short_ask, *image_), o);
          if (got.ok()) {
            ids = Ids(got->stats.token_ids());
          } else {
            failure = got.status().ToString();
          }
        } else {
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
          auto reader = shared_stub->Generate(&ctx, ToRequest(short_ask, *image_));
          hap::v1::GenerateResponse msg;
          while (reader->Read(&msg)) {
            if (msg.has_stats()) ids = Ids(msg.stats().token_ids());
          }
          const grpc::Status st = reader->Finish();
          if (!st.ok()) failure = st.error_message();
        }
        const double ms = MsSince(t0);
        if (failure.empty() && ids != short_ids) failure = "a different answer than hapctl run's";
        if (failure.empty()) {
          ++s.ok;
          s.worst_ms = std::max(s.worst_ms, ms);
        } else {
          s.failures.push_back(failure);
          if (s.failures.size() > 3) return;
        }
      }
    });
  }
  // Also when an assertion below returns early.
  auto join_others = absl::MakeCleanup([&] {
    stop = true;
    for (std::thread& t : others) {
      if (t.joinable()) t.join();
    }
  });

  hap::v1::GenerateRequest slow_request = ToRequest(long_ask, *image_);
  slow_request.set_request_id("slow-reader");
  grpc::ClientContext slow_ctx;
  slow_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto slow = slow_stub->Generate(&slow_ctx, slow_request);
  hap::v1::GenerateResponse msg;
  std::vector<int32_t> slow_ids;
  ASSERT_TRUE(slow->Read(&msg)) << "the slow client got no first message";
  ASSERT_TRUE(msg.has_delta());
  slow_ids.insert(slow_ids.end(), msg.delta().token_ids().begin(), msg.delta().token_ids().end());
  // From here the client reads nothing. Its window fills, then the front door's queue; the front
  // door then ends the request on its own, the client still not reading.
  const auto stalled = Clock::now();
  const std::optional<double> cut =
      WaitUntil([&] { return Metric(kCutoffs) == cutoffs_before + 1 && !InFlight("slow-reader"); },
                milliseconds(30000));
  ASSERT_TRUE(cut.has_value()) << "the front door still holds the stalled client's request";
  std::printf(
      "[ slow ] cut off %.0f ms after the client stopped reading (window %d bytes, "
      "--max-stream-queue %d)\n",
      MsSince(stalled), kWindowBytes, kMaxStreamQueue);
  EXPECT_EQ(Metric(kExhausted), exhausted_before + 1);
  std::move(join_others).Invoke();
  for (int c = 0; c < 3; ++c) {
    EXPECT_TRUE(served[c].failures.empty()) << "client " << c << ": " << served[c].failures.front();
    EXPECT_GE(served[c].ok, 2);
    // Their usual latency: the stalled stream holds no worker, no decode slot and no window of
    // the shared connection. Generous for a loaded machine; a blocked client would take the
    // 30 s deadline.
    EXPECT_LT(served[c].worst_ms, 3 * solo_ms + 3000) << "client " << c;
    std::printf(
        "[ slow ] other client %d (%s): %d requests served, worst %.0f ms (alone: %.0f "
        "ms)\n",
        c, c < 2 ? "own connection" : "the stalled client's connection", served[c].ok,
        served[c].worst_ms, solo_ms);
  }
  // Nothing is held on either side while the slow client still has not read.
  EXPECT_TRUE(WaitUntil([] { return HoldsNothing(sdk::Service::kPrefill); }, milliseconds(3000))
                  .has_value());
  EXPECT_TRUE(WaitUntil([] { return HoldsNothing(sdk::Service::kDecode); }, milliseconds(3000))
                  .has_value());
  EXPECT_TRUE(HoldsNothing(sdk::Service::kEncoder));

  // The client reads again: the beginning of its answer, then the reason it was cut off.
  int deltas = 1;
  bool got_stats = false;
  while (slow->Read(&msg)) {
    if (msg.has_stats()) got_stats = true;
    if (!msg.has_delta()) continue;
    ++deltas;
    slow_ids.insert(slow_ids.end(), msg.delta().token_ids().begin(), msg.delta().token_ids().end());
  }
  const grpc::Status st = slow->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_TRUE(absl::StrContains(st.error_message(), "stopped reading")) << st.error_message();
  EXPECT_TRUE(absl::StrContains(st.error_message(), "--max-stream-queue")) << st.error_message();
  EXPECT_FALSE(got_stats);
  ASSERT_LT(slow_ids.size(), long_ids.size());
  EXPECT_EQ(slow_ids, std::vector<int32_t>(long_ids.begin(), long_ids.begin() + slow_ids.size()))
      << "what the client got is not the beginning of its answer";
  std::printf(
      "[ slow ] the client, reading again, got %d messages (%zu of its %zu tokens), "
      "then %s\n",
      deltas, slow_ids.size(), long_ids.size(), st.error_message().c_str());

  // Still serving, and serves.
  auto serving = client->IsServing();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  auto again = client->Generate(ToRequest(short_ask, *image_));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Ids(again->stats.token_ids()), short_ids);
}

// A client that pauses while its whole answer waits (fewer messages than --max-stream-queue) is
// not cut off: the answer and the OK status wait for it. Only a client that lets the bound fill
// loses its stream.
TEST_F(SlowClientTest, APausedClientWithinTheBoundGetsItsWholeAnswer) {
  Ask ask;
  ask.max_new_tokens = kMaxStreamQueue - 16;
  std::string error;
  const nlohmann::json run = HapctlRun(*model_dir_, ask, &error);
  ASSERT_TRUE(error.empty()) << error;
  const double cutoffs_before = Metric(kCutoffs);
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kWindowBytes);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto channel =
      grpc::CreateCustomChannel(pipeline_->front_door(), grpc::InsecureChannelCredentials(), args);
  auto stub = hap::v1::Generation::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub->Generate(&ctx, ToRequest(ask, *image_));
  hap::v1::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  // Long enough for the answer to be generated and queued while nothing is read.
  std::this_thread::sleep_for(milliseconds(2000));
  std::vector<int32_t> stats_ids;
  while (reader->Read(&msg)) {
    if (msg.has_stats()) stats_ids = Ids(msg.stats().token_ids());
  }
  const grpc::Status st = reader->Finish();
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(stats_ids, run["token_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(Metric(kCutoffs), cutoffs_before);
  EXPECT_TRUE(WaitUntil([] { return HoldsNothing(sdk::Service::kPrefill); }, milliseconds(3000))
                  .has_value());
}

}  // namespace
}  // namespace hap::e2e
