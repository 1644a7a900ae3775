// Prefills that reach hap-prefill at about the same time, run as one batched pass of the decoder
// (VisionLanguageModel::RunPrefillBatch; docs/design.md, "Batched prefill"): one product per
// weight and, on a GPU, one attention launch per layer for all of them. A request submits its job
// and waits. Whoever finds no pass running leads the next one: it takes the queued jobs in arrival
// order while their prompt tokens fit the budget (the first always goes, however long its
// prompt), runs the pass, hands each job its result, and the next waiting request whose job is
// still queued leads the pass after. No thread of its own: a job waits for the passes ahead of it,
// each bounded by the budget, and runs in the first that has room for it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/model/pipeline.h"

namespace hap::svc {

class PrefillBatcher {
 public:
  using Clock = std::chrono::steady_clock;
  // Runs one pass: a result per job, in order. `all_cancelled` says whether every job of the pass
  // has been cancelled since (the pass may then stop between layers).
  using PassFn = std::function<std::vector<absl::StatusOr<PrefillResult>>(
      const std::vector<PrefillJob>& jobs, const std::function<bool()>& all_cancelled)>;

  // budget_tokens > 0: the prompt tokens (visual ones included) one pass takes at most, unless
  // its first job alone has more.
  PrefillBatcher(int64_t budget_tokens, PassFn pass);

  // The pass a job ran in.
  struct Pass {
    int jobs = 0;        // how many it ran
    int64_t tokens = 0;  // their prompt tokens
    Clock::time_point start, end;
  };
  // Runs `job`, of `tokens` prompt tokens, in a pass, and returns its result; blocks until then.
  // `cancelled` is polled while the job waits in the queue: a job cancelled there leaves it
  // (Cancelled) without running; once in a pass, the pass drops it between layers where the job
  // says so (PrefillJob::cancelled).
  absl::StatusOr<PrefillResult> Run(const PrefillJob& job, int64_t tokens,
                                    const std::function<bool()>& cancelled, Pass* pass);

  int64_t budget_tokens() const { return budget_; }
  // Jobs waiting for a pass (not those in the running one).
  size_t queued() const;

 private:
  struct Entry {
    const PrefillJob* job = nullptr;
    int64_t tokens = 0;
    const std::function<bool()>* cancelled = nullptr;
    bool taken = false;  // in a pass
    bool done = false;
    absl::StatusOr<PrefillResult> result;
    Pass pass;
  };
  // Takes the queue's front jobs that fit the budget and runs them (mu_ held on entry and exit,
  // not during the pass).
  void Lead(std::unique_lock<std::mutex>& lock);

  const int64_t budget_;
  const PassFn pass_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry*> queue_;
  bool running_ = false;
};

}  // namespace hap::svc
