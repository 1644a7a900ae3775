// Peers failing under a request, each with a deadline: the encoder killed while it holds a
// request, the front door killed while decode streams a sequence, decode frozen past the client's
// deadline. Each time the client gets the right code within its deadline, nothing stays held
// (requests, KV caches, leases, pool blocks), health says so, and the pipeline serves again once
// the peer is back.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "base/timer.h"
#include "gtest/gtest.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/pipeline_fixture.h"

namespace hap::e2e {
namespace {

using std::chrono::milliseconds;

class PeerFaultsTest : public PipelineSuite {
 protected:
  static void SetUpTestSuite() {
    sdk::LocalPipelineOptions o;
    o.encoder_args = o.prefill_args = o.decode_args = {"--threads", "1"};
    StartPipeline("peer_faults_tiny8", 3, std::move(o));
  }
  void TearDown() override {
    // Whatever a test froze or killed is back for the next one.
    for (sdk::Service s : {sdk::Service::kEncoder, sdk::Service::kPrefill, sdk::Service::kDecode}) {
      sdk::ChildProcess* c = pipeline_->process(s);
      if (c != nullptr) c->Signal(SIGCONT);
      if (c == nullptr || !c->running()) {
        ASSERT_TRUE(pipeline_->Restart(s).ok());
      }
    }
  }

  // Nothing held by service `s` (Idle in e2e_util.h).
  static bool Idle(sdk::Service s) { return e2e::Idle(pipeline_->address(s)); }

  // The pipeline serves again once the restarted peer is back: the front door's channel to it
  // reconnects within about a second (longer under a sanitizer), and until then a request gets
  // UNAVAILABLE, so it is asked again for up to 5 s.
  static void ExpectServesAgain() {
    auto client = Connect(sdk::Service::kPrefill);
    sdk::StreamOptions o;
    o.timeout = milliseconds(20000);
    const auto t0 = Clock::now();
    auto again = client->Generate(ToRequest(Ask(), *image_), o);
    while (!again.ok() && again.status().code() == absl::StatusCode::kUnavailable &&
           Clock::now() - t0 < milliseconds(5000)) {
      std::this_thread::sleep_for(milliseconds(100));
      again = client->Generate(ToRequest(Ask(), *image_), o);
    }
    EXPECT_TRUE(again.ok()) << again.status();
    std::printf("[ fault ] served again %.0f ms after the first try\n",
                std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
};

TEST_F(PeerFaultsTest, EncoderKilledHoldingTheRequestGivesUnavailable) {
  // The encoder is frozen, so the request waits in it; then it dies.
  pipeline_->process(sdk::Service::kEncoder)->Signal(SIGSTOP);
  auto client = Connect(sdk::Service::kPrefill);
  sdk::StreamOptions o;
  o.timeout = milliseconds(10000);
  absl::StatusOr<sdk::GenerateResult> got;
  const auto t0 = Clock::now();
  std::thread call([&] { got = client->Generate(ToRequest(Ask(), *image_), o); });
  ASSERT_TRUE(WaitUntil(
                  [&] {
                    auto s = client->GetState();
                    return s.ok() && s->in_flight_requests() == 1;
                  },
                  milliseconds(5000))
                  .has_value());
  std::this_thread::sleep_for(milliseconds(200));
  pipeline_->Kill(sdk::Service::kEncoder);
  call.join();
  const double ms = MsSince(t0);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_NE(got.status().message().find("encoder"), std::string::npos) << got.status();
  EXPECT_LT(ms, 10000);
  std::printf("[ fault ] encoder killed: client saw %s after %.0f ms\n",
              absl::StatusCodeToString(got.status().code()).c_str(), ms);
  // The front door holds nothing and keeps reporting SERVING (it can serve once the encoder is
  // back); decode never saw the request.
  EXPECT_TRUE(
      WaitUntil([] { return Idle(sdk::Service::kPrefill); }, milliseconds(3000)).has_value());
  EXPECT_TRUE(Idle(sdk::Service::kDecode));
  auto serving = client->IsServing();
  ASSERT_TRUE(serving.ok());
  EXPECT_TRUE(*serving);
  ASSERT_TRUE(pipeline_->Restart(sdk::Service::kEncoder).ok());
  ExpectServesAgain();
}

TEST_F(PeerFaultsTest, FrontDoorKilledWhileDecodeStreamsFreesTheSequence) {
  auto client = Connect(sdk::Service::kPrefill);
  sdk::StreamOptions o;
  o.timeout = milliseconds(20000);
  bool killed = false;
  const hap::v1::GenerateRequest request = ToRequest(LongAsk(), *image_);
  const auto t0 = Clock::now();
  o.on_delta = [&](const hap::v1::TextDelta&) {
    if (!killed) {
      killed = true;
      // Decode holds the sequence's KV blocks now, streaming tokens to the front door.
      pipeline_->Kill(sdk::Service::kPrefill);
    }
    return true;
  };
  auto got = client->Generate(request, o);
  const double ms = MsSince(t0);
  ASSERT_TRUE(killed);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_LT(ms, 5000);
  // Decode notices its caller is gone and frees the sequence's blocks.
  const std::optional<double> freed =
      WaitUntil([] { return Idle(sdk::Service::kDecode); }, milliseconds(5000));
  ASSERT_TRUE(freed.has_value()) << "decode still holds the dead caller's sequence";
  std::printf("[ fault ] front door killed: client saw UNAVAILABLE after %.0f ms; decode freed "
              "the sequence %.0f ms later\n",
              ms, *freed);
  ASSERT_TRUE(pipeline_->Restart(sdk::Service::kPrefill).ok());
  ExpectServesAgain();
}

TEST_F(PeerFaultsTest, DecodeFrozenPastTheDeadlineGivesDeadlineExceeded) {
  pipeline_->process(sdk::Service::kDecode)->Signal(SIGSTOP);
  auto client = Connect(sdk::Service::kPrefill);
  sdk::StreamOptions o;
  o.timeout = milliseconds(1500);
  const hap::v1::GenerateRequest request = ToRequest(LongAsk(), *image_);
  const auto t0 = Clock::now();
  auto got = client->Generate(request, o);
  const double ms = MsSince(t0);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_LT(ms, 1500 + 1000) << "the client waited well past its deadline";
  std::printf("[ fault ] decode frozen: client saw DEADLINE_EXCEEDED after %.0f ms (deadline "
              "1500)\n",
              ms);
  // The front door freed its side at the deadline (the KV lease ended with the cancelled call).
  EXPECT_TRUE(
      WaitUntil([] { return Idle(sdk::Service::kPrefill); }, milliseconds(3000)).has_value());
  // Thawed, decode finds the call cancelled and frees whatever it took.
  pipeline_->process(sdk::Service::kDecode)->Signal(SIGCONT);
  EXPECT_TRUE(
      WaitUntil([] { return Idle(sdk::Service::kDecode); }, milliseconds(5000)).has_value());
  ExpectServesAgain();
}

}  // namespace
}  // namespace hap::e2e
