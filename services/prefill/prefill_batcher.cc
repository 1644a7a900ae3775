#include "services/prefill/prefill_batcher.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "runtime/model/cancellation.h"

namespace hap::svc {
namespace {

// How often a job waiting in the queue looks at its cancellation.
constexpr auto kCancelPoll = std::chrono::milliseconds(20);

}  // namespace

PrefillBatcher::PrefillBatcher(int64_t budget_tokens, int layers, ComputeGate* gate, PassFn pass)
    : budget_(budget_tokens),
      layers_(layers),
      gate_(gate != nullptr ? gate : &own_gate_),
      pass_(std::move(pass)),
      gatherer_([this] { Gather(); }) {}

PrefillBatcher::~PrefillBatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  gatherer_.join();
}

absl::StatusOr<PrefillResult> PrefillBatcher::Run(const PrefillJob& job, int64_t tokens,
                                                  Pass* pass) {
  Entry entry;
  entry.job = &job;
  entry.tokens = tokens;
  std::unique_lock<std::mutex> lock(mu_);
  queue_.push_back(&entry);
  cv_.notify_all();  // the gathering thread
  while (!entry.done) {
    if (entry.to_run != nullptr) {
      std::unique_ptr<Taken> taken = std::move(entry.to_run);
      lock.unlock();
      RunPass(std::move(*taken));
      lock.lock();
      continue;
    }
    cv_.wait_for(lock, kCancelPoll);
    if (!entry.taken && !entry.done && entry.cancelled()) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), &entry));
      return absl::CancelledError("cancelled while queued to prefill");
    }
  }
  if (pass != nullptr) *pass = entry.pass;
  return std::move(entry.result);
}

size_t PrefillBatcher::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void PrefillBatcher::Gather() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    // The turn first, then the jobs: those that arrive while the pass ahead runs go together.
    lock.unlock();
    ComputeGate::Hold turn = gate_->Enter();
    lock.lock();
    std::vector<Entry*> batch;
    int64_t tokens = 0;
    while (!queue_.empty() && (batch.empty() || tokens + queue_.front()->tokens <= budget_)) {
      Entry* e = queue_.front();
      queue_.pop_front();
      e->taken = true;
      tokens += e->tokens;
      batch.push_back(e);
    }
    if (batch.empty()) continue;  // every queued job was cancelled meanwhile; the turn ends
    Entry* runner = batch.front();
    runner->to_run.reset(new Taken{std::move(batch), tokens, std::move(turn)});
    cv_.notify_all();
  }
}

void PrefillBatcher::RunPass(Taken taken) {
  const std::vector<Entry*>& batch = taken.batch;
  std::vector<PrefillJob> jobs;
  jobs.reserve(batch.size());
  for (const Entry* e : batch) jobs.push_back(*e->job);
  Pass pass;
  pass.jobs = static_cast<int>(batch.size());
  pass.tokens = taken.tokens;
  pass.start = Clock::now();
  std::vector<absl::StatusOr<PrefillResult>> results;
  {
    ScopedCancellation cancellation([&batch] {
      return std::all_of(batch.begin(), batch.end(), [](const Entry* e) { return e->cancelled(); });
    });
    // A pass within the budget keeps the turn to its end; one over it is sliced.
    std::optional<TurnBudget> turns;
    const int layers = layers_;
    if (layers > 0 && taken.tokens > budget_) turns.emplace(&taken.turn, budget_ * layers);
    ScopedTurnHook slices([&turns](int64_t rows) {
      if (turns.has_value()) turns->Spend(rows);
    });
    results = pass_(jobs);
    if (turns.has_value()) {
      pass.yields = turns->yields();
      pass.yield_wait_ms = turns->waited_ms();
    }
  }
  pass.end = Clock::now();
  { ComputeGate::Hold ended = std::move(taken.turn); }  // the next pass may start
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i]->result = i < results.size()
                           ? std::move(results[i])
                           : absl::InternalError("the batched prefill returned too few results");
    batch[i]->pass = pass;
    batch[i]->done = true;
  }
  cv_.notify_all();
}

}  // namespace hap::svc
