// Where batches of finished spans go: OTLP over gRPC or HTTP, or memory (tests).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "telemetry/span.h"

namespace hap::telemetry {

using SpanBatch = std::vector<std::unique_ptr<SpanData>>;

class SpanExporter {
 public:
  virtual ~SpanExporter() = default;
  // Sends one batch; blocks for at most the exporter's own timeout. Called from one thread.
  virtual absl::Status Export(const SpanBatch& batch) = 0;
  // Makes an Export in progress (or the next one) return soon; from any thread. Used at
  // shutdown so a stalled collector cannot hold the process.
  virtual void Cancel() {}
};

// Keeps every exported span (tests, and a debugging aid).
class InMemoryExporter final : public SpanExporter {
 public:
  absl::Status Export(const SpanBatch& batch) override;
  std::vector<SpanData> Spans() const;  // copies, in export order
  size_t size() const;
  int batches() const;

 private:
  mutable std::mutex mu_;
  std::vector<SpanData> spans_;
  int batches_ = 0;
};

}  // namespace hap::telemetry
