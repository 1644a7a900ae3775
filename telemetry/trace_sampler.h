// Head sampling as the OpenTelemetry SDK names it (OTEL_TRACES_SAMPLER / _ARG): always_on,
// always_off, traceidratio, and their parentbased_* forms, which follow a parent's sampled flag
// and use the named sampler only for new traces.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "telemetry/trace_context.h"

namespace hap::telemetry {

class TraceSampler {
 public:
  enum class Root { kAlwaysOn, kAlwaysOff, kRatio };

  TraceSampler() = default;  // parentbased_always_on, the SDK default
  TraceSampler(Root root, double ratio, bool parent_based);

  // `name` as OTEL_TRACES_SAMPLER spells it; `arg` the ratio for the *traceidratio samplers
  // (default 1.0; must lie in [0, 1]). InvalidArgument for anything else.
  static absl::StatusOr<TraceSampler> Parse(std::string_view name, std::string_view arg);

  // Whether a new span of `trace_id` is recorded and exported; `parent` is null or invalid for
  // a root span.
  bool ShouldSample(const SpanContext* parent, const TraceId& trace_id) const;

  // A trace id is sampled by the ratio when its low 64 bits, as an unsigned number, fall below
  // ratio·2^64 — so every process with the same ratio decides the same way for a trace.
  static bool RatioSamples(double ratio, const TraceId& trace_id);

  std::string Describe() const;  // "parentbased_traceidratio{0.25}"

 private:
  Root root_ = Root::kAlwaysOn;
  double ratio_ = 1.0;
  bool parent_based_ = true;
};

}  // namespace hap::telemetry
