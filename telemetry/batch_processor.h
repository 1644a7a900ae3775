// The batching span processor: ending a span only moves it into a bounded queue (a short
// critical section, never a wait for the network); a background thread sends the queue in
// batches. When the queue is full the span is dropped and counted, so a slow or dead collector
// costs requests nothing but their spans.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "telemetry/exporter.h"
#include "telemetry/span.h"

namespace hap::telemetry {

// The OpenTelemetry SDK's defaults (OTEL_BSP_*).
struct BatchOptions {
  size_t max_queue_size = 2048;
  size_t max_export_batch_size = 512;
  std::chrono::milliseconds schedule_delay{5000};
};

struct ExportStats {
  uint64_t spans_queued = 0;           // accepted into the queue
  uint64_t spans_exported = 0;         // in a batch the exporter accepted
  uint64_t dropped_queue_full = 0;     // refused at OnEnd: the queue was full
  uint64_t dropped_export_failed = 0;  // in a batch the exporter failed to send
  uint64_t dropped_shutdown = 0;       // still queued when shutdown gave up
  uint64_t export_failures = 0;        // failed Export calls
  uint64_t queue_size = 0;             // spans waiting now
  uint64_t dropped() const { return dropped_queue_full + dropped_export_failed + dropped_shutdown; }
};

class BatchSpanProcessor final : public SpanProcessor {
 public:
  BatchSpanProcessor(std::unique_ptr<SpanExporter> exporter, BatchOptions options);
  ~BatchSpanProcessor() override;  // Shutdown(5 s)

  void OnEnd(std::unique_ptr<SpanData> span) override;

  // Exports everything queued before the call; false if `timeout` passed first.
  bool ForceFlush(std::chrono::milliseconds timeout);
  // Flushes for up to `timeout`, then cancels the exporter and stops the thread; spans left
  // behind are counted as dropped. Idempotent.
  void Shutdown(std::chrono::milliseconds timeout);

  ExportStats stats() const;

 private:
  void Loop();

  const std::unique_ptr<SpanExporter> exporter_;
  const BatchOptions options_;

  std::mutex shutdown_mu_;  // one Shutdown at a time
  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // the worker waits for spans / flush / stop
  std::condition_variable flush_cv_;  // ForceFlush waits for the worker
  std::deque<std::unique_ptr<SpanData>> queue_;
  uint64_t enqueued_ = 0;   // spans ever queued (flush bookkeeping)
  uint64_t completed_ = 0;  // spans taken off the queue and finished with (exported or not)
  uint64_t flush_target_ = 0;
  bool stop_ = false;

  std::atomic<uint64_t> exported_{0}, dropped_full_{0}, dropped_failed_{0}, dropped_shutdown_{0},
      failures_{0};
  std::thread worker_;
};

}  // namespace hap::telemetry
