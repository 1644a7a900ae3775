// A strict parser for the Prometheus text exposition format (0.0.4), for tests: it rejects what
// a Prometheus server would reject (bad names, label syntax, escapes, values, a TYPE after its
// samples, a family split in two, duplicate series) and checks histogram invariants (buckets
// by ascending `le`, cumulative counts, a +Inf bucket equal to _count, a _sum).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace hap::testing {

struct PromSample {
  std::string name;  // as written: "x_bucket", "x_sum", ...
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PromFamily {
  std::string name;
  std::string type = "untyped";  // counter | gauge | histogram | summary | untyped
  std::string help;
  std::vector<PromSample> samples;
};

class PromExposition {
 public:
  static absl::StatusOr<PromExposition> Parse(const std::string& text);

  const std::map<std::string, PromFamily>& families() const { return families_; }
  const PromFamily* family(const std::string& name) const;
  // The value of the one sample `name` whose labels include `labels` (nullopt when none; an
  // error-free exposition may still hold several — then the first).
  std::optional<double> Value(const std::string& name,
                              const std::map<std::string, std::string>& labels = {}) const;
  // Σ over every sample `name` whose labels include `labels` (0 when none).
  double Sum(const std::string& name, const std::map<std::string, std::string>& labels = {}) const;

 private:
  std::map<std::string, PromFamily> families_;
};

}  // namespace hap::testing
