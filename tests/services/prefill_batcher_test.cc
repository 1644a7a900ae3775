// PrefillBatcher: the jobs that wait while a pass runs go into the next passes in arrival order,
// as many as fit the token budget (a longer prompt alone); each caller gets its own job's result;
// a job cancelled while queued leaves without running. The pass here is a stand-in that records
// what it was given and answers each job with its id.
#include "services/prefill/prefill_batcher.h"

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace hap::svc {
namespace {

// A pass that blocks while `hold` is set, records each pass's job ids (carried in
// kv_reserve_rows) and answers each job with its id as the first token.
struct FakePass {
  std::mutex mu;
  std::vector<std::vector<int>> passes;
  std::atomic<bool> hold{false};
  std::atomic<int> running{0};

  PrefillBatcher::PassFn Fn() {
    return [this](const std::vector<PrefillJob>& jobs, const std::function<bool()>&) {
      ++running;
      while (hold) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::vector<absl::StatusOr<PrefillResult>> out;
      std::vector<int> ids;
      for (const PrefillJob& j : jobs) {
        ids.push_back(j.kv_reserve_rows);
        PrefillResult r;
        r.first_token = j.kv_reserve_rows;
        out.push_back(std::move(r));
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        passes.push_back(ids);
      }
      --running;
      return out;
    };
  }
};

// Submits job `id` of `tokens` on its own thread; the future holds its first token, or -1 and the
// status code.
std::future<std::pair<int, absl::StatusCode>> Submit(PrefillBatcher* b, int id, int64_t tokens,
                                                     std::atomic<bool>* cancelled = nullptr) {
  return std::async(std::launch::async, [=] {
    PrefillJob job;
    job.kv_reserve_rows = id;
    const std::function<bool()> is_cancelled = [cancelled] {
      return cancelled != nullptr && cancelled->load();
    };
    PrefillBatcher::Pass pass;
    absl::StatusOr<PrefillResult> r = b->Run(job, tokens, is_cancelled, &pass);
    if (!r.ok()) return std::make_pair(-1, r.status().code());
    EXPECT_GE(pass.jobs, 1);
    return std::make_pair(r->first_token, absl::StatusCode::kOk);
  });
}

void WaitFor(const std::function<bool()>& cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!cond() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(cond());
}

TEST(PrefillBatcher, QueuedJobsGoInArrivalOrderAsTheBudgetAllows) {
  FakePass fake;
  PrefillBatcher batcher(250, fake.Fn());
  fake.hold = true;
  auto first = Submit(&batcher, 0, 10);  // runs alone and holds the pass
  WaitFor([&] { return fake.running.load() == 1; });
  std::vector<std::future<std::pair<int, absl::StatusCode>>> rest;
  const std::vector<int64_t> tokens = {100, 100, 300, 50, 50};
  for (size_t i = 0; i < tokens.size(); ++i) {
    rest.push_back(Submit(&batcher, static_cast<int>(i) + 1, tokens[i]));
    WaitFor([&] { return batcher.queued() == i + 1; });
  }
  fake.hold = false;
  EXPECT_EQ(first.get().first, 0);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i].get().first, static_cast<int>(i) + 1);
  // 100 + 100 fit 250, 300 does not join them and goes alone (over the budget), then 50 + 50.
  const std::vector<std::vector<int>> want = {{0}, {1, 2}, {3}, {4, 5}};
  EXPECT_EQ(fake.passes, want);
  EXPECT_EQ(batcher.queued(), 0u);
}

TEST(PrefillBatcher, AJobCancelledWhileQueuedLeavesWithoutRunning) {
  FakePass fake;
  PrefillBatcher batcher(1000, fake.Fn());
  fake.hold = true;
  auto first = Submit(&batcher, 0, 10);
  WaitFor([&] { return fake.running.load() == 1; });
  std::atomic<bool> cancel{false};
  auto cancelled = Submit(&batcher, 1, 10, &cancel);
  WaitFor([&] { return batcher.queued() == 1; });
  auto kept = Submit(&batcher, 2, 10);
  WaitFor([&] { return batcher.queued() == 2; });
  cancel = true;
  EXPECT_EQ(cancelled.get(), std::make_pair(-1, absl::StatusCode::kCancelled));
  EXPECT_EQ(batcher.queued(), 1u);
  fake.hold = false;
  EXPECT_EQ(first.get().first, 0);
  EXPECT_EQ(kept.get().first, 2);
  const std::vector<std::vector<int>> want = {{0}, {2}};
  EXPECT_EQ(fake.passes, want);
}

TEST(PrefillBatcher, ManyCallersEachGetTheirOwnResult) {
  FakePass fake;
  PrefillBatcher batcher(64, fake.Fn());
  std::vector<std::future<std::pair<int, absl::StatusCode>>> calls;
  for (int i = 0; i < 40; ++i) calls.push_back(Submit(&batcher, i, 16));
  for (int i = 0; i < 40; ++i) EXPECT_EQ(calls[i].get().first, i);
  int jobs = 0;
  for (const std::vector<int>& p : fake.passes) {
    EXPECT_LE(p.size(), 4u);  // 4 × 16 tokens fill the budget
    jobs += static_cast<int>(p.size());
  }
  EXPECT_EQ(jobs, 40);
}

}  // namespace
}  // namespace hap::svc
