#include "runtime/engine/decode_engine.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "base/status_macros.h"

namespace hap {

absl::StatusOr<double> WarmUpDecode(const LanguageModel& model, int batch, DType kv_dtype,
                                    int64_t* workspace_bytes) {
  const Backend& backend = model.backend();
  const TextConfig& text = model.text_config();
  const int64_t before = backend.DeviceBytesInUse();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<DeviceKv>> caches;
  std::vector<KvStore*> stores;
  std::vector<Sampler> samplers(std::max(batch, 1), Sampler{SamplingParams{}});
  std::vector<Sampler*> sampler_ptrs;
  for (int i = 0; i < std::max(batch, 1); ++i) {
    HAP_ASSIGN_OR_RETURN(std::unique_ptr<DeviceKv> kv,
                         DeviceKv::Create(backend, text.num_hidden_layers,
                                          text.num_key_value_heads * text.head_dim, kv_dtype, 1));
    stores.push_back(kv.get());
    caches.push_back(std::move(kv));
    sampler_ptrs.push_back(&samplers[i]);
  }
  const std::vector<int32_t> tokens(stores.size(), 0);
  DecodeWorkspace workspace(backend);
  HAP_RETURN_IF_ERROR(
      model.DecodeBatchSampled(tokens, stores, sampler_ptrs, nullptr, &workspace).status());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (workspace_bytes != nullptr) {
    *workspace_bytes = std::max<int64_t>(backend.DeviceBytesInUse() - before, 0);
  }
  return ms;
}

DecodeEngine::DecodeEngine(const LanguageModel& model, const DecodeEngineOptions& options)
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
  seq.job.paged.reset();
  seq.paged.reset();
  {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
  }
  if (seq.job.done) seq.job.done(std::move(result));
}

bool DecodeEngine::Admit(std::vector<Sequence>& active, bool stopping) {
  std::vector<DecodeJob> taken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!waiting_.empty() &&
           (stopping || static_cast<int>(active.size() + taken.size()) < options_.max_batch)) {
      taken.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
    running_ += static_cast<int>(taken.size());
  }
  // Jobs whose cache still has to move into blocks go in arrival order: once one waits for
  // blocks, the later ones wait behind it. Jobs that already hold their blocks (the transfer
  // landed in them) never wait for those: they may be what frees the blocks.
  std::vector<DecodeJob> deferred;
  for (DecodeJob& job : taken) {
    Sequence seq;
    seq.job = std::move(job);
    if (seq.job.paged != nullptr) {
      seq.paged = std::move(seq.job.paged);
    } else if (!deferred.empty()) {
      deferred.push_back(std::move(seq.job));
      continue;
    } else if (options_.pool != nullptr && !stopping) {
      const int reserve = std::max(seq.job.stop.max_new_tokens, 0);
      absl::StatusOr<std::unique_ptr<PagedKv>> paged =
          PagedKv::FromCache(options_.pool, seq.job.cache, reserve);
      if (!paged.ok() && absl::IsResourceExhausted(paged.status()) &&
          PagedKv::BlocksFor(*options_.pool, seq.job.cache, reserve) <=
              options_.pool->stats().blocks_total) {
        // Not now: this job waits, first in line, for blocks to come back.
        deferred.push_back(std::move(seq.job));
        continue;
      }
      if (!paged.ok()) {
        Retire(seq, paged.status());
        continue;
      }
      seq.paged = std::move(*paged);
      seq.job.cache = KvCache();  // the blocks hold it now
    }
    seq.stream = std::make_unique<TokenStream>(model_, seq.job.sampler, seq.job.stop, seq.job.sink);
    seq.stream->Accept(seq.job.first_token);
    active.push_back(std::move(seq));
  }
  if (deferred.empty()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t j = deferred.size(); j-- > 0;) waiting_.push_front(std::move(deferred[j]));
  running_ -= static_cast<int>(deferred.size());
  return true;
}

void DecodeEngine::Loop() {
  std::vector<Sequence> active;
  DecodeWorkspace workspace(model_.backend());
  bool waiting_for_blocks = false;
  for (;;) {
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (waiting_for_blocks && active.empty()) {
        // The blocks a waiting job needs are held outside the engine (transfers still landing
        // in theirs): look again shortly rather than spin.
        cv_.wait_for(lock, kBlockWait, [&] { return stop_; });
      }
      cv_.wait(lock, [&] { return stop_ || !waiting_.empty() || !active.empty(); });
      stopping = stop_;
    }
    // Admission between steps, in arrival order, up to the batch limit.
    waiting_for_blocks = Admit(active, stopping);
    // Sequences that are finished, cancelled or asked to stop leave before the step, and so does
    // one that cannot take another step (its context is full): alone, the others go on.
    std::vector<absl::Status> unable(active.size());
    for (size_t i = 0; i < active.size(); ++i) {
      Sequence& seq = active[i];
      if (stopping || (seq.job.should_stop && seq.job.should_stop())) seq.stream->Cancel();
      if (!seq.stream->done()) unable[i] = model_.CheckCanDecode(*seq.store());
    }
    size_t kept = 0;
    for (size_t i = 0; i < active.size(); ++i) {
      if (active[i].stream->done()) {
        Retire(active[i], active[i].stream->Finish());
      } else if (!unable[i].ok()) {
        Retire(active[i], unable[i]);
      } else {
        if (kept != i) active[kept] = std::move(active[i]);
        ++kept;
      }
    }
    active.resize(kept);
    if (active.empty()) {
      if (stopping) {
        std::lock_guard<std::mutex> lock(mu_);
        if (waiting_.empty()) return;
      }
      continue;
    }

    std::vector<int32_t> tokens;
    std::vector<KvStore*> caches;
    std::vector<Sampler*> samplers;
    for (Sequence& seq : active) {
      tokens.push_back(seq.stream->last_token());
      caches.push_back(seq.store());
      samplers.push_back(seq.stream->mutable_sampler());
    }
    // Each sequence's next token, drawn by its own sampler where the logits are (on a device,
    // only ids or a few candidates per sequence come back).
    RowSamplingCounts sampled;
    absl::StatusOr<std::vector<int32_t>> next =
        model_.DecodeBatchSampled(tokens, caches, samplers, &sampled, &workspace);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.steps;
      stats_.sequence_steps += static_cast<int64_t>(active.size());
      stats_.max_batch_seen = std::max(stats_.max_batch_seen, static_cast<int>(active.size()));
      stats_.graph_captures = workspace.graph_captures();
      stats_.graph_replays = workspace.graph_replays();
    }
    if (!next.ok()) {
      // A failed step leaves every cache of the batch unusable: the batch ends with the error.
      for (Sequence& seq : active) Retire(seq, next.status());
      active.clear();
      continue;
    }
    if (options_.on_sampled) options_.on_sampled(sampled);
    for (size_t i = 0; i < active.size(); ++i) active[i].stream->Accept((*next)[i]);
  }
}

}  // namespace hap
