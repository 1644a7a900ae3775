#include "runtime/engine/decode_engine.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/model/llama.h"

namespace hap {
namespace {

// The longest context a warm-up captures steps for: past it (64 slices of 64 rows on a GPU) a
// longer context changes only the graph's row bound, captured when first met.
constexpr int kMaxWarmUpContext = 4096;

// A cache a warm-up step decodes over: `rows` rows per layer in spans of `span_rows` (0: one
// span) that all read the same zeroed block, so that a step over it has the shape of a step over
// a cache of that many rows paged so, without holding their memory. The row a step appends goes
// to a slot of its own that nothing reads. It holds no rows to read, copy or rewrite.
class WarmUpKv final : public KvStore {
 public:
  WarmUpKv(int n_layers, int rows, int span_rows, DType dtype, int64_t row_bytes, Device device,
           const void* zeros, void* slot)
      : rows_(rows),
        len_(n_layers, rows),
        span_rows_(span_rows),
        dtype_(dtype),
        row_bytes_(row_bytes),
        device_(device),
        zeros_(zeros),
        slot_(slot) {
    next_position = rows;
  }
  int n_layers() const override { return static_cast<int>(len_.size()); }
  int len(int layer) const override { return len_[layer]; }
  absl::Status Append(const Backend&, int, const float*, const float*, const int32_t*,
                      int) override {
    return Unsupported("Append");
  }
  absl::StatusOr<KvRowSlot> AppendRowSlot(int layer, int32_t) override {
    ++len_[layer];
    return KvRowSlot{slot_, static_cast<char*>(slot_) + row_bytes_};
  }
  void Spans(int layer, std::vector<KvSpan>* spans) const override {
    spans->clear();
    const int step = span_rows_ > 0 ? span_rows_ : len_[layer];
    for (int left = len_[layer]; left > 0; left -= step) {
      spans->push_back(KvSpan{zeros_, zeros_, std::min(left, step)});
    }
  }
  int max_span_rows() const override { return span_rows_; }
  // Drops the rows steps appended.
  void Rewind() {
    len_.assign(len_.size(), rows_);
    next_position = rows_;
  }
  DType dtype() const override { return dtype_; }
  Device device() const override { return device_; }
  int64_t row_bytes() const override { return row_bytes_; }
  absl::Status ReadRows(int, int, int, void*, void*, int32_t*) const override {
    return Unsupported("ReadRows");
  }
  absl::Status ReserveRows(int) override { return absl::OkStatus(); }  // its rows hold no memory
  absl::Status RewritePositions(int, int, const int32_t*, int) override {
    return Unsupported("RewritePositions");
  }

 private:
  static absl::Status Unsupported(const char* what) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": a warm-up cache has shape but no rows"));
  }
  int rows_;
  std::vector<int> len_;
  int span_rows_;
  DType dtype_;
  int64_t row_bytes_;
  Device device_;
  const void* zeros_;
  void* slot_;
};

// The warm-up's steps (DecodeEngine::WarmUp) on the engine thread's workspace.
absl::StatusOr<DecodeWarmUp> WarmUpSteps(const LanguageModel& model, int max_batch, DType kv_dtype,
                                         int span_rows, int max_context, DecodeWorkspace* ws) {
  const auto t0 = std::chrono::steady_clock::now();
  const Backend& backend = model.backend();
  const TextConfig& text = model.text_config();
  const int64_t row_bytes =
      int64_t{text.num_key_value_heads} * text.head_dim * static_cast<int64_t>(DTypeSize(kv_dtype));
  const int longest = std::min({max_context, text.max_position_embeddings, kMaxWarmUpContext});
  // The batch sizes steps are captured at and the row bounds (powers of two from 64), smallest
  // first, as many as the workspace keeps graphs (where that cuts the list, the largest batch
  // sizes are left to capture when first met). The largest shape runs first of all: the workspace's
  // buffers and the thread's scratch reach their size in that step, so no later step moves what
  // the earlier graphs hold.
  std::vector<int> sizes, contexts;
  for (int k = 1; k <= std::max(max_batch, 1); ++k) {
    if (sizes.empty() || sizes.back() != DecodeRowsFor(k)) sizes.push_back(DecodeRowsFor(k));
  }
  for (int bound = 64; bound < longest; bound *= 2) contexts.push_back(bound);
  contexts.push_back(longest);
  std::vector<std::pair<int, int>> shapes = {{sizes.back(), contexts.back()}};
  for (int b : sizes) {
    for (int context : contexts) {
      if (static_cast<int>(shapes.size()) == kMaxDecodeGraphs) break;
      if (b != sizes.back() || context != contexts.back()) shapes.emplace_back(b, context);
    }
  }
  const int block = span_rows > 0 ? span_rows : longest;
  BackendArray<uint8_t> zeros(backend), slots(backend);
  const std::vector<uint8_t> host_zeros(static_cast<size_t>(block) * row_bytes, 0);
  HAP_RETURN_IF_ERROR(zeros.Assign(host_zeros.data(), host_zeros.size()));
  HAP_RETURN_IF_ERROR(slots.Resize(static_cast<size_t>(2) * sizes.back() * row_bytes));
  const int64_t captured_before = ws->graph_captures();
  DecodeWarmUp report;
  for (const auto& [b, context] : shapes) {
    std::vector<std::unique_ptr<WarmUpKv>> caches;
    std::vector<KvStore*> stores;
    std::vector<Sampler> samplers(b, Sampler{SamplingParams{}});
    std::vector<Sampler*> sampler_ptrs;
    for (int i = 0; i < b; ++i) {
      // Rows up to `context` once the step appends its row: the step's bound is context's.
      caches.push_back(std::make_unique<WarmUpKv>(text.num_hidden_layers, context - 1, span_rows,
                                                  kv_dtype, row_bytes, backend.device(),
                                                  zeros.data(), slots.data() + 2 * i * row_bytes));
      stores.push_back(caches.back().get());
      sampler_ptrs.push_back(&samplers[i]);
    }
    const std::vector<int32_t> tokens(b, 0);
    // A step whose capture found its scratch too small runs op by op (growing it): the second
    // run captures.
    const int64_t captures = ws->graph_captures();
    for (int attempt = 0; attempt < 2 && ws->graph_captures() == captures; ++attempt) {
      absl::StatusOr<std::vector<int32_t>> next =
          model.DecodeBatchSampled(tokens, stores, sampler_ptrs, nullptr, ws);
      if (!next.ok()) {
        return absl::Status(next.status().code(),
                            absl::StrCat("a warm-up step of ", b, " sequences of ", context,
                                         " rows: ", next.status().message()));
      }
      for (std::unique_ptr<WarmUpKv>& cache : caches) cache->Rewind();
    }
    ++report.steps;
  }
  report.graph_captures = ws->graph_captures() - captured_before;
  report.batch = sizes.back();
  report.context = contexts.back();
  report.ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace

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
    : model_(model), options_(options), pool_(options.pool), thread_([this] { Loop(); }) {}

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
  KvBlockPool* pool;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pool = pool_;
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
    } else if (pool != nullptr && !stopping) {
      const int reserve = std::max(seq.job.stop.max_new_tokens, 0);
      absl::StatusOr<std::unique_ptr<PagedKv>> paged =
          PagedKv::FromCache(pool, seq.job.cache, reserve);
      if (!paged.ok() && absl::IsResourceExhausted(paged.status()) &&
          PagedKv::BlocksFor(*pool, seq.job.cache, reserve) <= pool->stats().blocks_total) {
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

absl::StatusOr<DecodeWarmUp> DecodeEngine::WarmUp(int max_context) {
  if (!model_.captures_decode_steps()) return DecodeWarmUp{};
  const KvBlockPool* pool = this->pool();
  const DType kv_dtype = pool != nullptr     ? pool->dtype()
                         : options_.kv_dtype ? *options_.kv_dtype
                                             : model_.options().kv_dtype;
  const int span_rows = pool != nullptr ? pool->block_rows() : options_.kv_block_rows;
  if (max_context <= 0) max_context = model_.text_config().max_position_embeddings;
  std::promise<absl::StatusOr<DecodeWarmUp>> result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (task_) return absl::FailedPreconditionError("DecodeEngine::WarmUp: one is running");
    task_ = [&](DecodeWorkspace* ws) {
      const int64_t before = model_.backend().DeviceBytesInUse();
      absl::StatusOr<DecodeWarmUp> report =
          WarmUpSteps(model_, options_.max_batch, kv_dtype, span_rows, max_context, ws);
      if (report.ok()) {
        report->device_bytes = std::max<int64_t>(model_.backend().DeviceBytesInUse() - before, 0);
      }
      result.set_value(std::move(report));
    };
  }
  cv_.notify_all();
  return result.get_future().get();
}

void DecodeEngine::SetPool(KvBlockPool* pool) {
  std::lock_guard<std::mutex> lock(mu_);
  pool_ = pool;
}

KvBlockPool* DecodeEngine::pool() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pool_;
}

void DecodeEngine::Loop() {
  std::vector<Sequence> active;
  DecodeWorkspace workspace(model_.backend());
  bool waiting_for_blocks = false;
  for (;;) {
    bool stopping;
    std::function<void(DecodeWorkspace*)> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (waiting_for_blocks && active.empty() && !task_) {
        // The blocks a waiting job needs are held outside the engine (transfers still landing
        // in theirs): look again shortly rather than spin.
        cv_.wait_for(lock, kBlockWait, [&] { return stop_ || task_ != nullptr; });
      }
      cv_.wait(lock,
               [&] { return stop_ || task_ != nullptr || !waiting_.empty() || !active.empty(); });
      stopping = stop_;
      task = std::move(task_);
      task_ = nullptr;
    }
    if (task) {
      // Between steps, on this thread: what it captures replays here.
      task(&workspace);
      std::lock_guard<std::mutex> lock(mu_);
      stats_.graph_captures = workspace.graph_captures();
      stats_.graph_replays = workspace.graph_replays();
      continue;
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
