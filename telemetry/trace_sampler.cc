#include "telemetry/trace_sampler.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace hap::telemetry {

TraceSampler::TraceSampler(Root root, double ratio, bool parent_based)
    : root_(root), ratio_(ratio), parent_based_(parent_based) {}

absl::StatusOr<TraceSampler> TraceSampler::Parse(std::string_view name, std::string_view arg) {
  double ratio = 1.0;
  const bool wants_ratio = name == "traceidratio" || name == "parentbased_traceidratio";
  if (wants_ratio && !arg.empty()) {
    const std::string s(arg);
    char* end = nullptr;
    ratio = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || *end != '\0' || !std::isfinite(ratio) || ratio < 0 || ratio > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampler argument '", std::string(arg), "' is not a ratio in [0, 1]"));
    }
  }
  if (name.empty() || name == "parentbased_always_on") return TraceSampler(Root::kAlwaysOn, 1, true);
  if (name == "always_on") return TraceSampler(Root::kAlwaysOn, 1, false);
  if (name == "always_off") return TraceSampler(Root::kAlwaysOff, 0, false);
  if (name == "parentbased_always_off") return TraceSampler(Root::kAlwaysOff, 0, true);
  if (name == "traceidratio") return TraceSampler(Root::kRatio, ratio, false);
  if (name == "parentbased_traceidratio") return TraceSampler(Root::kRatio, ratio, true);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown sampler '", std::string(name),
      "' (always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, "
      "parentbased_traceidratio)"));
}

bool TraceSampler::RatioSamples(double ratio, const TraceId& trace_id) {
  if (ratio >= 1) return true;
  if (ratio <= 0) return false;
  // ratio·2^64 as an unsigned bound; 2^64 itself is not representable, hence the ratio < 1 case.
  const uint64_t bound = static_cast<uint64_t>(std::ldexp(ratio, 64));
  return trace_id.Low64() < bound;
}

bool TraceSampler::ShouldSample(const SpanContext* parent, const TraceId& trace_id) const {
  if (parent_based_ && parent != nullptr && parent->valid()) return parent->sampled();
  switch (root_) {
    case Root::kAlwaysOn:
      return true;
    case Root::kAlwaysOff:
      return false;
    case Root::kRatio:
      return RatioSamples(ratio_, trace_id);
  }
  return false;
}

std::string TraceSampler::Describe() const {
  std::string root;
  switch (root_) {
    case Root::kAlwaysOn:
      root = "always_on";
      break;
    case Root::kAlwaysOff:
      root = "always_off";
      break;
    case Root::kRatio:
      root = absl::StrFormat("traceidratio{%g}", ratio_);
      break;
  }
  return parent_based_ ? "parentbased_" + root : root;
}

}  // namespace hap::telemetry
