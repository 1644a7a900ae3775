#include "runtime/engine/decode_engine.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace hap {

DecodeEngine::DecodeEngine(const LlavaModel& model, const DecodeEngineOptions& options)
    : model_(model), options_(options), thread_([this] { Loop(); }) {}

DecodeEngine::~DecodeEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DecodeEngine::Submit(DecodeJob job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting_.push_back(std::move(job));
  }
  cv_.notify_all();
}

int DecodeEngine::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(waiting_.size());
}

int DecodeEngine::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

DecodeEngineStats DecodeEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void DecodeEngine::Retire(Sequence& seq, absl::StatusOr<DecodeResult> result) {
  seq.job.cache = KvCache();
  {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
  }
  if (seq.job.done) seq.job.done(std::move(result));
}

void DecodeEngine::Loop() {
  std::vector<Sequence> active;
  const int vocab = model_.config().text.vocab_size;
  for (;;) {
    std::vector<DecodeJob> admitted;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !waiting_.empty() || !active.empty(); });
      stopping = stop_;
      // Admission between steps, in arrival order, up to the batch limit.
      while (!waiting_.empty() &&
             (stopping || static_cast<int>(active.size() + admitted.size()) < options_.max_batch)) {
        admitted.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
      }
      running_ += static_cast<int>(admitted.size());
    }
    for (DecodeJob& job : admitted) {
      Sequence seq;
      seq.job = std::move(job);
      seq.stream = std::make_unique<TokenStream>(model_, seq.job.sampler, seq.job.stop,
                                                 seq.job.sink);
      seq.stream->Accept(seq.job.first_token);
      active.push_back(std::move(seq));
    }
    // Sequences that are finished, cancelled or asked to stop leave before the step.
    for (Sequence& seq : active) {
      if (stopping || (seq.job.should_stop && seq.job.should_stop())) seq.stream->Cancel();
    }
    auto finished = std::stable_partition(active.begin(), active.end(),
                                          [](const Sequence& s) { return !s.stream->done(); });
    for (auto it = finished; it != active.end(); ++it) Retire(*it, it->stream->Finish());
    active.erase(finished, active.end());
    if (active.empty()) {
      if (stopping) {
        std::lock_guard<std::mutex> lock(mu_);
        if (waiting_.empty()) return;
      }
      continue;
    }

    std::vector<int32_t> tokens;
    std::vector<KvCache*> caches;
    for (Sequence& seq : active) {
      tokens.push_back(seq.stream->last_token());
      caches.push_back(&seq.job.cache);
    }
    absl::StatusOr<std::vector<float>> logits = model_.DecodeBatch(tokens, caches);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.steps;
      stats_.sequence_steps += static_cast<int64_t>(active.size());
      stats_.max_batch_seen = std::max(stats_.max_batch_seen, static_cast<int>(active.size()));
    }
    if (!logits.ok()) {
      // A failed step leaves every cache of the batch unusable: the batch ends with the error.
      for (Sequence& seq : active) Retire(seq, logits.status());
      active.clear();
      continue;
    }
    for (size_t i = 0; i < active.size(); ++i) {
      active[i].stream->SampleAndAccept(logits->data() + i * static_cast<size_t>(vocab), vocab);
    }
  }
}

}  // namespace hap
