#include "services/prefill/prefill_batcher.h"

#include <algorithm>
#include <utility>

namespace hap::svc {
namespace {

// How often a job waiting in the queue looks at its cancellation.
constexpr auto kCancelPoll = std::chrono::milliseconds(20);

}  // namespace

PrefillBatcher::PrefillBatcher(int64_t budget_tokens, PassFn pass)
    : budget_(budget_tokens), pass_(std::move(pass)) {}

absl::StatusOr<PrefillResult> PrefillBatcher::Run(const PrefillJob& job, int64_t tokens,
                                                  const std::function<bool()>& cancelled,
                                                  Pass* pass) {
  Entry entry;
  entry.job = &job;
  entry.tokens = tokens;
  entry.cancelled = &cancelled;
  std::unique_lock<std::mutex> lock(mu_);
  queue_.push_back(&entry);
  while (!entry.done) {
    if (!running_) {
      Lead(lock);
      continue;
    }
    cv_.wait_for(lock, kCancelPoll);
    if (!entry.taken && !entry.done && cancelled()) {
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

void PrefillBatcher::Lead(std::unique_lock<std::mutex>& lock) {
  running_ = true;
  std::vector<Entry*> batch;
  int64_t tokens = 0;
  while (!queue_.empty() && (batch.empty() || tokens + queue_.front()->tokens <= budget_)) {
    Entry* e = queue_.front();
    queue_.pop_front();
    e->taken = true;
    tokens += e->tokens;
    batch.push_back(e);
  }
  std::vector<PrefillJob> jobs;
  jobs.reserve(batch.size());
  for (const Entry* e : batch) jobs.push_back(*e->job);
  lock.unlock();
  const std::function<bool()> all_cancelled = [&batch] {
    return std::all_of(batch.begin(), batch.end(),
                       [](const Entry* e) { return (*e->cancelled)(); });
  };
  Pass pass;
  pass.jobs = static_cast<int>(batch.size());
  pass.tokens = tokens;
  pass.start = Clock::now();
  std::vector<absl::StatusOr<PrefillResult>> results = pass_(jobs, all_cancelled);
  pass.end = Clock::now();
  lock.lock();
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i]->result = i < results.size()
                           ? std::move(results[i])
                           : absl::InternalError("the batched prefill returned too few results");
    batch[i]->pass = pass;
    batch[i]->done = true;
  }
  running_ = false;
  cv_.notify_all();
}

}  // namespace hap::svc
