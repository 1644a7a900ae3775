// Prefills that reach hap-prefill at about the same time, run as one batched pass of the decoder
// (VisionLanguageModel::RunPrefillBatch; docs/design.md, "Batched prefill"): one product per
// weight and, on a GPU, one attention launch per layer for all of them. A request submits its job
// and waits. The batcher's gathering thread waits for the compute gate's turn whenever jobs are
// queued; when it gets the turn it takes the queued jobs in arrival order while their prompt
// tokens fit the budget (the first always goes, however long its prompt) and hands the pass, with
// the turn, to the first job's thread, which runs it and hands each job its result. So a job waits
// for the passes ahead of it and runs in the first that has room for it, and the jobs that arrive
// while a pass runs are taken together when it ends. A pass over the budget (one prompt longer
// than it) is sliced by layers as a lone prefill is: once it has processed budget × layers rows
// and jobs wait for the turn, it hands the turn to the pass they make, so they do not wait for
// all of it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "base/compute_gate.h"
#include "runtime/model/pipeline.h"

namespace hap::svc {

class PrefillBatcher {
 public:
  using Clock = std::chrono::steady_clock;
  // Runs one pass: a result per job, in order. It runs with a ScopedCancellation that says whether
  // every job of the pass has been cancelled since (the pass may then stop between layers), and,
  // when sliced, a ScopedTurnHook that spends the turn by the rows of each layer (BeforeLayer).
  using PassFn = std::function<std::vector<absl::StatusOr<PrefillResult>>(
      const std::vector<PrefillJob>& jobs)>;

  // budget_tokens > 0: the prompt tokens (visual ones included) one pass takes at most, unless
  // its first job alone has more. layers: the decoder's, for the slices of a pass over the budget
  // (0: never sliced). gate: where passes take turns with the process's other compute (null: a
  // gate of the batcher's own).
  PrefillBatcher(int64_t budget_tokens, int layers, ComputeGate* gate, PassFn pass);
  ~PrefillBatcher();
  PrefillBatcher(const PrefillBatcher&) = delete;
  PrefillBatcher& operator=(const PrefillBatcher&) = delete;

  // The pass a job ran in.
  struct Pass {
    int jobs = 0;        // how many it ran
    int64_t tokens = 0;  // their prompt tokens
    Clock::time_point start, end;
    int yields = 0;            // turns it handed to the passes queued behind it
    double yield_wait_ms = 0;  // and the time it waited for them
  };
  // Runs `job`, of `tokens` prompt tokens, in a pass, and returns its result; blocks until then.
  // Its PrefillJob::cancelled (may be empty) is polled while it waits in the queue: a job
  // cancelled there leaves it (Cancelled) without running; once in a pass, the pass drops it
  // between layers.
  absl::StatusOr<PrefillResult> Run(const PrefillJob& job, int64_t tokens, Pass* pass);

  // The decoder's layers, once its model is loaded (a service's batcher is made before).
  void set_layers(int layers) { layers_ = layers; }

  int64_t budget_tokens() const { return budget_; }
  // Jobs waiting for a pass (not those in a running one).
  size_t queued() const;

 private:
  struct Entry;
  // A pass the gathering thread took, with the compute turn, for its first job's thread to run.
  struct Taken {
    std::vector<Entry*> batch;
    int64_t tokens = 0;
    ComputeGate::Hold turn;
  };
  struct Entry {
    const PrefillJob* job = nullptr;
    int64_t tokens = 0;
    bool taken = false;  // in a pass
    bool done = false;
    std::unique_ptr<Taken> to_run;  // set on the first job of a pass, for its thread to run
    absl::StatusOr<PrefillResult> result;
    Pass pass;
    bool cancelled() const { return job->cancelled && job->cancelled(); }
  };
  // The gathering thread: takes the turn while jobs are queued, then the queue's front jobs that
  // fit the budget.
  void Gather();
  // Runs a taken pass on the calling thread, ends its turn and hands each job its result.
  void RunPass(Taken taken);

  const int64_t budget_;
  std::atomic<int> layers_;
  ComputeGate own_gate_;
  ComputeGate* const gate_;
  const PassFn pass_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry*> queue_;
  bool stopping_ = false;
  std::thread gatherer_;
};

}  // namespace hap::svc
