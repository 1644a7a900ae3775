#include "telemetry/batch_processor.h"

#include <algorithm>

namespace hap::telemetry {

absl::Status InMemoryExporter::Export(const SpanBatch& batch) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& s : batch) spans_.push_back(*s);
  ++batches_;
  return absl::OkStatus();
}

std::vector<SpanData> InMemoryExporter::Spans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spans_;
}

size_t InMemoryExporter::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spans_.size();
}

int InMemoryExporter::batches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return batches_;
}

namespace {

BatchOptions Sanitize(BatchOptions o) {
  o.max_queue_size = std::max<size_t>(o.max_queue_size, 1);
  o.max_export_batch_size = std::clamp<size_t>(o.max_export_batch_size, 1, o.max_queue_size);
  return o;
}

}  // namespace

BatchSpanProcessor::BatchSpanProcessor(std::unique_ptr<SpanExporter> exporter, BatchOptions options)
    : exporter_(std::move(exporter)), options_(Sanitize(options)) {
  worker_ = std::thread([this] { Loop(); });
}

BatchSpanProcessor::~BatchSpanProcessor() { Shutdown(std::chrono::seconds(5)); }

void BatchSpanProcessor::OnEnd(std::unique_ptr<SpanData> span) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) {
      dropped_shutdown_.fetch_add(1, std::memory_order_relaxed);
      return;  // `span` is freed outside the lock
    }
    if (queue_.size() >= options_.max_queue_size) {
      dropped_full_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.push_back(std::move(span));
    ++enqueued_;
    wake = queue_.size() >= options_.max_export_batch_size;
  }
  if (wake) work_cv_.notify_one();
}

void BatchSpanProcessor::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait_for(lock, options_.schedule_delay, [&] {
      return stop_ || queue_.size() >= options_.max_export_batch_size || flush_target_ > completed_;
    });
    if (queue_.empty()) {
      if (stop_) break;
      flush_cv_.notify_all();
      continue;
    }
    // Send what is queued, batch by batch, releasing the lock while the exporter works.
    while (!queue_.empty()) {
      SpanBatch batch;
      const size_t n = std::min(queue_.size(), options_.max_export_batch_size);
      batch.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      lock.unlock();
      const absl::Status status = exporter_->Export(batch);
      if (status.ok()) {
        exported_.fetch_add(n, std::memory_order_relaxed);
      } else {
        failures_.fetch_add(1, std::memory_order_relaxed);
        dropped_failed_.fetch_add(n, std::memory_order_relaxed);
      }
      batch.clear();
      lock.lock();
      completed_ += n;
      flush_cv_.notify_all();
      // A stop request ends the loop after the batch in flight; Shutdown counts the rest.
      if (stop_) break;
    }
    if (stop_) break;
  }
  flush_cv_.notify_all();
}

bool BatchSpanProcessor::ForceFlush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = enqueued_;
  if (stop_) return completed_ >= target;
  flush_target_ = std::max(flush_target_, target);
  work_cv_.notify_one();
  return flush_cv_.wait_for(lock, timeout, [&] { return completed_ >= target || stop_; }) &&
         completed_ >= target;
}

void BatchSpanProcessor::Shutdown(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> once(shutdown_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
  }
  ForceFlush(timeout);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;  // whatever is still queued is given up
  }
  work_cv_.notify_one();
  exporter_->Cancel();  // a stalled Export returns now
  if (worker_.joinable()) worker_.join();
  std::lock_guard<std::mutex> lock(mu_);
  dropped_shutdown_.fetch_add(queue_.size(), std::memory_order_relaxed);
  completed_ += queue_.size();
  queue_.clear();
  flush_cv_.notify_all();
}

ExportStats BatchSpanProcessor::stats() const {
  ExportStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.spans_queued = enqueued_;
    s.queue_size = queue_.size();
  }
  s.spans_exported = exported_.load(std::memory_order_relaxed);
  s.dropped_queue_full = dropped_full_.load(std::memory_order_relaxed);
  s.dropped_export_failed = dropped_failed_.load(std::memory_order_relaxed);
  s.dropped_shutdown = dropped_shutdown_.load(std::memory_order_relaxed);
  s.export_failures = failures_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace hap::telemetry
