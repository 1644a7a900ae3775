// Continuous batching of decode steps: one engine thread per process runs the next token of
// every active sequence as one batched step (LanguageModel::DecodeBatch: each weight read once
// per step for the whole batch), admits new sequences between steps and retires finished ones,
// so throughput grows with the number of concurrent answers instead of each answer competing
// for the cores on its own thread. Sampling, stop conditions and streaming stay per sequence
// (TokenStream), seeded exactly as in a solo run.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/status/statusor.h"
#include "runtime/engine/kv_block_pool.h"
#include "runtime/engine/paged_kv.h"
#include "runtime/model/generate.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/language_model.h"
#include "runtime/model/sampler.h"

namespace hap {

struct DecodeEngineOptions {
  int max_batch = 16;  // sequences per step; more wait, in arrival order, for a free slot
  // When set, each admitted sequence's cache moves into blocks of this pool (PagedKv) with room
  // for its max_new_tokens; a sequence waits while the pool lacks its blocks and fails with
  // RESOURCE_EXHAUSTED when it needs more than the whole pool. Null: caches stay contiguous.
  KvBlockPool* pool = nullptr;
  // Called on the engine thread after each step that sampled, with how its rows were sampled
  // (RowSamplingCounts: ids, candidates or rows back from a device; in place on the CPU
  // backend). hap-decode counts them in hap_sampled_rows_total. May be empty.
  std::function<void(const RowSamplingCounts&)> on_sampled = nullptr;
  // Without a pool at construction: the dtype and block rows of the pool SetPool attaches once
  // the warm-up has said what a step holds, so that WarmUp's steps run over caches of that
  // shape. Unset: ModelOptions::kv_dtype, one span a layer.
  std::optional<DType> kv_dtype = std::nullopt;
  int kv_block_rows = 0;
};

// One sequence handed to the engine after its prefill.
struct DecodeJob {
  KvCache cache;
  // The cache already in blocks of the engine's pool (the KV transfer landed there); `cache`
  // is then empty and admission takes no blocks.
  std::unique_ptr<PagedKv> paged;
  int32_t first_token = 0;  // drawn by `sampler` from the prefill logits
  Sampler sampler{SamplingParams{}};
  StopCriteria stop;
  // Streams text; called on the engine thread. Returning false cancels the sequence.
  TokenSink sink;
  // Polled before each step (client gone, deadline passed): true ends the sequence as
  // cancelled. May be empty.
  std::function<bool()> should_stop;
  // Called exactly once on the engine thread when the sequence ends: the result, or the error
  // of the step it was in. The cache is freed before the call.
  std::function<void(absl::StatusOr<DecodeResult>)> done;
};

struct DecodeEngineStats {
  int64_t steps = 0;           // batched steps run
  int64_t sequence_steps = 0;  // Σ batch sizes (tokens decoded)
  int max_batch_seen = 0;
  // Steps captured as graphs, and steps run by replaying one (DecodeWorkspace; 0 where the
  // backend runs ops as they are called or decode graphs are off).
  int64_t graph_captures = 0;
  int64_t graph_replays = 0;
};

// One decode step of `batch` sequences over fresh caches in the model's backend's memory
// (DeviceKv of `kv_dtype`, one row each after the step): what a service runs before it serves
// where decode steps are not captured (DecodeEngine::WarmUp otherwise), so that its first request
// costs what later ones do (kernel modules loaded, product handles
// made, the step planned), and so that it knows what a step at that batch holds. Returns the
// step's wall time in ms and, in *workspace_bytes, the backend's DeviceBytesInUse() with the
// step's workspace still held less what it held before (the attention's slice results of long
// contexts, at most a few tens of MiB, come on top).
absl::StatusOr<double> WarmUpDecode(const LanguageModel& model, int batch, DType kv_dtype,
                                    int64_t* workspace_bytes);

// What DecodeEngine::WarmUp ran.
struct DecodeWarmUp {
  int steps = 0;               // 0 where decode steps are not captured
  int64_t graph_captures = 0;  // steps captured as graphs
  int batch = 0;               // the largest batch size a step was captured at
  int context = 0;             // the longest context, in rows
  double ms = 0;               // wall time, all steps
  // What the backend holds on the device after the warm-up beyond what it held before: the
  // engine's step workspace at the largest shape, which it keeps (hap-decode sizes its KV pool
  // within --gpu-memory by it). The attention's slice results of contexts past the warm-up's
  // come on top.
  int64_t device_bytes = 0;
};

class DecodeEngine {
 public:
  DecodeEngine(const LanguageModel& model, const DecodeEngineOptions& options);
  // Ends every sequence still waiting or running as cancelled, then joins the thread.
  ~DecodeEngine();
  DecodeEngine(const DecodeEngine&) = delete;
  DecodeEngine& operator=(const DecodeEngine&) = delete;

  void Submit(DecodeJob job);
  // Captures, on the engine's thread and before it serves, the decode steps it will run where
  // they run as graphs (LanguageModel::captures_decode_steps; elsewhere it runs nothing): one
  // step for each batch size steps are captured at (DecodeRowsFor) up to options.max_batch, each
  // at every row bound from 64 (doubling) up to max_context rows (0: the model's context; at most
  // 4,096), over caches shaped as the pool's (its dtype and block rows; without a pool,
  // ModelOptions::kv_dtype, one span a layer) that hold no rows. Afterwards a step of those
  // sizes replays a graph instead of capturing one, so a first request costs what later ones
  // do. The largest shape first, so the steps' buffers reach their size before the first capture;
  // at most kMaxDecodeGraphs shapes (the largest batch sizes beyond that capture when first met).
  // Call it before the first Submit; returns when done.
  absl::StatusOr<DecodeWarmUp> WarmUp(int max_context = 0);
  // Attaches the pool of an engine made without one (its shape as options.kv_dtype and
  // kv_block_rows said), after WarmUp and before the first Submit.
  void SetPool(KvBlockPool* pool);

  int waiting() const;
  int running() const;
  DecodeEngineStats stats() const;
  // The engine's KV block pool (null without one).
  KvBlockPool* pool() const;

 private:
  struct Sequence {
    DecodeJob job;
    std::unique_ptr<PagedKv> paged;  // the cache, when the engine has a pool
    std::unique_ptr<TokenStream> stream;
    KvStore* store() { return paged ? static_cast<KvStore*>(paged.get()) : &job.cache; }
  };
  void Loop();
  // Ends `seq` with `result`: frees its cache and its slot, then reports.
  void Retire(Sequence& seq, absl::StatusOr<DecodeResult> result);
  // Takes waiting jobs into `active` while the batch has room and (with a pool) blocks are
  // free; jobs that can never fit end with the pool's error. True when a job is left waiting
  // for blocks.
  bool Admit(std::vector<Sequence>& active, bool stopping);
  // How long an idle engine waits before looking for free blocks again.
  static constexpr std::chrono::milliseconds kBlockWait{2};

  const LanguageModel& model_;
  const DecodeEngineOptions options_;
  mutable std::mutex mu_;
  KvBlockPool* pool_;  // options.pool, or SetPool's; guarded by mu_
  std::condition_variable cv_;
  std::deque<DecodeJob> waiting_;  // guarded by mu_
  int running_ = 0;                // admitted and not yet retired; guarded by mu_
  DecodeEngineStats stats_;        // guarded by mu_
  bool stop_ = false;              // guarded by mu_
  // Run by the engine thread, with its workspace, before its next step (WarmUp); guarded by mu_.
  std::function<void(DecodeWorkspace*)> task_;
  std::thread thread_;
};

}  // namespace hap
