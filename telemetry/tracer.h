// The tracer: starts spans (new ids, sampling decision, parent link) and hands finished ones to
// a processor. A default-constructed Tracer is disabled and every span it starts is a no-op;
// the process-wide tracer (GlobalTracer) is disabled until SetGlobalTracer installs one.
#pragma once

#include <memory>
#include <string_view>

#include "telemetry/trace_sampler.h"
#include "telemetry/span.h"
#include "telemetry/trace_context.h"

namespace hap::telemetry {

class Tracer {
 public:
  Tracer() = default;  // disabled
  Tracer(TraceSampler sampler, std::shared_ptr<SpanProcessor> processor);

  bool enabled() const { return processor_ != nullptr; }

  // A span named `name`, child of `parent` when it is valid (same trace id; sampled as the
  // sampler decides, by default following the parent), else the root of a new trace.
  // `start_unix_ns` 0 = now.
  Span StartSpan(std::string_view name, SpanKind kind, const SpanContext& parent,
                 uint64_t start_unix_ns = 0) const;
  Span StartSpan(std::string_view name, const Span& parent, SpanKind kind = SpanKind::kInternal,
                 uint64_t start_unix_ns = 0) const {
    return StartSpan(name, kind, parent.context(), start_unix_ns);
  }

 private:
  TraceSampler sampler_;
  std::shared_ptr<SpanProcessor> processor_;
};

// Random ids, never all zero (thread-local generator seeded from the OS).
TraceId NewTraceId();
SpanId NewSpanId();

// The process-wide tracer. SetGlobalTracer is meant for startup (before requests are served);
// the tracer it replaces stays alive so spans in flight may still end on it.
const Tracer& GlobalTracer();
void SetGlobalTracer(std::shared_ptr<Tracer> tracer);

}  // namespace hap::telemetry
