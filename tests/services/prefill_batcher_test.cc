// PrefillBatcher: the jobs that wait while a pass runs go into the next passes in arrival order,
// as many as fit the token budget (a longer prompt alone); each caller gets its own job's result;
// a job cancelled while queued leaves without running; a pass over the budget hands the compute
// turn to the jobs queued behind it between layers, one within it does not. The passes here are
// stand-ins that record what they were given and answer each job with its id.
#include "services/prefill/prefill_batcher.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "base/compute_gate.h"
#include "gtest/gtest.h"
#include "runtime/model/cancellation.h"

namespace hap::svc {
namespace {

// The job ids of a pass (carried in kv_reserve_rows).
std::vector<int> IdsOf(const std::vector<PrefillJob>& jobs) {
  std::vector<int> ids;
  for (const PrefillJob& j : jobs) ids.push_back(j.kv_reserve_rows);
  return ids;
}

// A result per job: its id as the first token.
std::vector<absl::StatusOr<PrefillResult>> AnswerWithIds(const std::vector<int>& ids) {
  std::vector<absl::StatusOr<PrefillResult>> out;
  for (int id : ids) {
    PrefillResult r;
    r.first_token = id;
    out.push_back(std::move(r));
  }
  return out;
}

// A pass that blocks while `hold` is set, records each pass's job ids and answers each job with
// its id.
struct FakePass {
  std::mutex mu;
  std::vector<std::vector<int>> passes;
  std::atomic<bool> hold{false};
  std::atomic<int> running{0};

  PrefillBatcher::PassFn Fn() {
    return [this](const std::vector<PrefillJob>& jobs) {
      ++running;
      while (hold) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const std::vector<int> ids = IdsOf(jobs);
      {
        std::lock_guard<std::mutex> lock(mu);
        passes.push_back(ids);
      }
      --running;
      return AnswerWithIds(ids);
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
    job.cancelled = [cancelled] { return cancelled != nullptr && cancelled->load(); };
    PrefillBatcher::Pass pass;
    absl::StatusOr<PrefillResult> r = b->Run(job, tokens, &pass);
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
  PrefillBatcher batcher(250, /*layers=*/0, nullptr, fake.Fn());
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
  PrefillBatcher batcher(1000, /*layers=*/0, nullptr, fake.Fn());
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
  PrefillBatcher batcher(64, /*layers=*/0, nullptr, fake.Fn());
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

// A pass of `layers` layers that reports each layer's rows (the jobs' tokens) to the slice hook
// as the decoder does, and records (first job id, layer) as each layer runs. The pass of job
// `pause_id` waits after its first layer until `resume` says so.
struct LayeredPass {
  int layers = 4;
  int pause_id = -1;
  std::function<bool()> resume;
  std::mutex mu;
  std::vector<std::pair<int, int>> events;
  std::vector<std::vector<int>> passes;
  std::atomic<int> paused{0};

  PrefillBatcher::PassFn Fn() {
    return [this](const std::vector<PrefillJob>& jobs) {
      const std::vector<int> ids = IdsOf(jobs);
      int64_t rows = 0;
      for (int id : ids) rows += 100 * id + 50;  // the tokens SubmitLayered gives each id
      {
        std::lock_guard<std::mutex> lock(mu);
        passes.push_back(ids);
      }
      for (int l = 0; l < layers; ++l) {
        BeforeLayer(rows);
        {
          std::lock_guard<std::mutex> lock(mu);
          events.emplace_back(ids.front(), l);
        }
        if (l == 0 && ids.front() == pause_id) {
          ++paused;
          while (!resume()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
      return AnswerWithIds(ids);
    };
  }
};

// Job `id` has 100·id + 50 tokens.
std::future<PrefillBatcher::Pass> SubmitLayered(PrefillBatcher* b, int id) {
  return std::async(std::launch::async, [=] {
    PrefillJob job;
    job.kv_reserve_rows = id;  // never cancelled: no PrefillJob::cancelled
    PrefillBatcher::Pass pass;
    absl::StatusOr<PrefillResult> r = b->Run(job, 100 * id + 50, &pass);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) {
      EXPECT_EQ(r->first_token, id);
    }
    return pass;
  });
}

// A prompt longer than the budget runs alone, in slices of budget × layers rows: a short one
// submitted during its first layer runs whole between two of its layers, instead of after it.
TEST(PrefillBatcher, APassOverTheBudgetHandsTheTurnToTheJobsBehindIt) {
  ComputeGate gate;
  LayeredPass fake;
  fake.pause_id = 3;                                           // 350 tokens: over the budget
  fake.resume = [&gate] { return gate.waiting_turns() > 0; };  // the short job's pass waits
  PrefillBatcher batcher(200, fake.layers, &gate, fake.Fn());
  auto long_one = SubmitLayered(&batcher, 3);
  WaitFor([&] { return fake.paused.load() == 1; });
  auto short_one = SubmitLayered(&batcher, 0);  // 50 tokens
  const PrefillBatcher::Pass long_pass = long_one.get();
  const PrefillBatcher::Pass short_pass = short_one.get();
  // 350 rows a layer against a turn of 200 × 4 = 800: it hands the turn on before its third
  // layer, the first boundary past the turn where somebody waits.
  const std::vector<std::pair<int, int>> want = {{3, 0}, {3, 1}, {0, 0}, {0, 1},
                                                 {0, 2}, {0, 3}, {3, 2}, {3, 3}};
  EXPECT_EQ(fake.events, want);
  EXPECT_EQ(long_pass.yields, 1);
  EXPECT_EQ(long_pass.jobs, 1);
  EXPECT_EQ(short_pass.yields, 0);
  EXPECT_LT(short_pass.end, long_pass.end);
}

// A pass within the budget keeps the turn to its end; the jobs that arrive meanwhile wait and
// then go together in the next pass.
TEST(PrefillBatcher, APassWithinTheBudgetKeepsTheTurn) {
  ComputeGate gate;
  LayeredPass fake;
  fake.pause_id = 1;  // 150 tokens
  std::atomic<bool> go{false};
  fake.resume = [&go] { return go.load(); };
  PrefillBatcher batcher(400, fake.layers, &gate, fake.Fn());
  auto first = SubmitLayered(&batcher, 1);
  WaitFor([&] { return fake.paused.load() == 1; });
  auto second = SubmitLayered(&batcher, 0);
  WaitFor([&] { return batcher.queued() == 1; });
  auto third = SubmitLayered(&batcher, 2);
  WaitFor([&] { return batcher.queued() == 2 && gate.waiting_turns() > 0; });
  go = true;
  EXPECT_EQ(first.get().yields, 0);
  EXPECT_EQ(second.get().jobs, 2);
  EXPECT_EQ(third.get().jobs, 2);
  const std::vector<std::vector<int>> passes = {{1}, {0, 2}};
  EXPECT_EQ(fake.passes, passes);
  const std::vector<std::pair<int, int>> want = {{1, 0}, {1, 1}, {1, 2}, {1, 3},
                                                 {0, 0}, {0, 1}, {0, 2}, {0, 3}};
  EXPECT_EQ(fake.events, want);
}

}  // namespace
}  // namespace hap::svc
