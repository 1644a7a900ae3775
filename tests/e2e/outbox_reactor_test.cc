// OutboxReactor's close/write race: a write completing on another thread may finish the call and
// delete the reactor while Close() is still running. A fake reactor base completes writes on an
// executor thread, as gRPC does, and runs OnDone inside Finish; under AddressSanitizer (make test's unit
// run) any touch of a deleted reactor fails the test. Also: every call finishes exactly once,
// with the first Close's status, after all of its messages were written.
#include "services/wire/outbox_reactor.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace hap::svc {
namespace {

// Runs callbacks in order on one thread (gRPC's completion threads, reduced to one).
class Executor {
 public:
  Executor() : thread_([this] { Loop(); }) {}
  ~Executor() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Post(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(f));
    }
    cv_.notify_all();
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      f();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

struct Outcome {
  std::atomic<int> finishes{0}, deletes{0}, written{0};
  std::atomic<int> last_code{-1};
};

// What gRPC's ServerWriteReactor offers OutboxReactor, with completions on the executor.
class FakeWriteReactor {
 public:
  virtual ~FakeWriteReactor() = default;
  virtual void OnWriteDone(bool ok) = 0;
  virtual void OnCancel() = 0;
  virtual void OnDone() = 0;

  void StartWrite(const std::string* message) {
    EXPECT_FALSE(message->empty());
    ++outcome_->written;
    if (executor_ != nullptr) executor_->Post([this] { OnWriteDone(true); });  // else: stalled
  }
  // gRPC may run OnDone (which deletes the reactor) as soon as Finish is called: here at once,
  // on the calling thread, which makes the race window as wide as it can be.
  void Finish(const grpc::Status& status) {
    ++outcome_->finishes;
    outcome_->last_code = status.error_code();
    OnDone();
  }

 protected:
  Executor* executor_ = nullptr;
  Outcome* outcome_ = nullptr;
};

class Reactor final : public OutboxReactor<FakeWriteReactor, std::string> {
 public:
  Reactor(Executor* executor, Outcome* outcome) {
    // OutboxReactor default-constructs its base, as gRPC's reactors are; set the fake's fields.
    executor_ = executor;
    outcome_ = outcome;
    // The call's telemetry is live, so closing it takes as long as in a server (metrics).
    grpc::ServerContext ctx;
    StartRpc(ctx, "hap.test.Outbox/Write");
  }
  ~Reactor() override { ++outcome_->deletes; }
};

TEST(OutboxReactorTest, CloseRacingAWriteNeverTouchesADeletedReactor) {
  Executor executor;
  constexpr int kCalls = 20000;
  Outcome outcome;
  for (int i = 0; i < kCalls; ++i) {
    auto* r = new Reactor(&executor, &outcome);
    // A write in flight on the executor, then Close from this thread: the executor's
    // OnWriteDone may finish the call (and OnDone delete `r`) while Close runs.
    ASSERT_TRUE(r->Send("token"));
    r->Close(grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "done"));
  }
  // Drain: every call finishes once and is deleted once.
  for (int spin = 0; spin < 5000 && outcome.deletes.load() < kCalls; ++spin) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(outcome.deletes.load(), kCalls);
  EXPECT_EQ(outcome.finishes.load(), kCalls);
  EXPECT_EQ(outcome.written.load(), kCalls);
  EXPECT_EQ(outcome.last_code.load(), grpc::StatusCode::OUT_OF_RANGE);
}

TEST(OutboxReactorTest, FirstCloseWinsAndQueuedMessagesAreWrittenFirst) {
  Executor executor;
  Outcome outcome;
  for (int i = 0; i < 2000; ++i) {
    auto* r = new Reactor(&executor, &outcome);
    std::thread other([r] {
      r->Send("a");
      r->Send("b");
    });
    other.join();
    r->Close(grpc::Status(grpc::StatusCode::ABORTED, "first"));
    // A second Close is ignored; `r` may already be deleted, so it is not called again here.
  }
  for (int spin = 0; spin < 5000 && outcome.deletes.load() < 2000; ++spin) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(outcome.deletes.load(), 2000);
  EXPECT_EQ(outcome.finishes.load(), 2000);
  EXPECT_EQ(outcome.written.load(), 4000);
  EXPECT_EQ(outcome.last_code.load(), grpc::StatusCode::ABORTED);
}

// Writes that never complete, as when the client's flow-control window is full (no executor);
// the test completes the one in flight.
class Stalled final : public OutboxReactor<FakeWriteReactor, std::string> {
 public:
  explicit Stalled(Outcome* outcome) { outcome_ = outcome; }
  Stalled(Outcome* outcome, size_t max_queued) : OutboxReactor(max_queued) { outcome_ = outcome; }
  ~Stalled() override { ++outcome_->deletes; }
  void CompleteWrite(bool ok) { OnWriteDone(ok); }
};

// A client that stops reading: writes never complete, so messages queue; at the bound the call
// is cut off instead of the queue growing without end. The fake has no gRPC call, so here the
// transport ends the stalled write; with a real call Close cancels the call with its status,
// which ends the write at once (tests/e2e/slow_client_test.cc).
TEST(OutboxReactorTest, AClientThatStopsReadingIsCutOffAtTheQueueBound) {
  Outcome outcome;
  auto* r = new Stalled(&outcome);
  ASSERT_TRUE(r->Send("first"));  // written at once (in flight)
  size_t accepted = 0;
  while (r->Send("token")) ++accepted;
  EXPECT_EQ(accepted, (OutboxReactor<FakeWriteReactor, std::string>::kDefaultMaxQueued));
  EXPECT_TRUE(r->overflowed());
  EXPECT_FALSE(r->Send("more"));
  r->Close(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "not reading"));
  EXPECT_EQ(outcome.finishes.load(), 0);  // the write in flight must end first
  r->CompleteWrite(false);                // the transport gives up on the stalled client
  EXPECT_EQ(outcome.finishes.load(), 1);
  EXPECT_EQ(outcome.last_code.load(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(outcome.deletes.load(), 1);
  EXPECT_EQ(outcome.written.load(), 1);
}

// The derived reactor sets the bound (hap-prefill's --max-stream-queue); a call whose messages
// were dropped never ends OK, whatever the handler closes it with.
TEST(OutboxReactorTest, TheBoundIsTheReactorsAndAnOverflowedCallIsNeverOk) {
  Outcome outcome;
  auto* r = new Stalled(&outcome, 3);
  EXPECT_EQ(r->max_queued(), 3u);
  ASSERT_TRUE(r->Send("first"));
  size_t accepted = 0;
  while (r->Send("token")) ++accepted;
  EXPECT_EQ(accepted, 3u);
  EXPECT_TRUE(r->overflowed());
  r->Close(grpc::Status::OK);
  r->CompleteWrite(false);
  EXPECT_EQ(outcome.finishes.load(), 1);
  EXPECT_EQ(outcome.last_code.load(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(outcome.deletes.load(), 1);
}

}  // namespace
}  // namespace hap::svc
