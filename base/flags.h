// The project's command-line flag parser (hapctl, the services' options, the benches):
// `--name value`, `--name=value` and boolean `--name`, typed getters whose errors name the flag.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hap {

class Flags {
 public:
  // `value_flags` take a value; `bool_flags` do not. Anything else is an error naming the flag.
  static absl::StatusOr<Flags> Parse(const std::vector<std::string>& args,
                                     const std::set<std::string>& value_flags,
                                     const std::set<std::string>& bool_flags);
  // argv[1..argc) as Parse takes it (a program's own flags).
  static absl::StatusOr<Flags> Parse(int argc, char** argv,
                                     const std::set<std::string>& value_flags,
                                     const std::set<std::string>& bool_flags);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  bool Bool(const std::string& name) const { return Has(name); }
  std::optional<std::string> Get(const std::string& name) const;
  std::string GetOr(const std::string& name, const std::string& fallback) const;
  absl::StatusOr<std::string> Required(const std::string& name) const;
  absl::StatusOr<int64_t> Int(const std::string& name, int64_t fallback) const;
  absl::StatusOr<double> Double(const std::string& name, double fallback) const;
  absl::StatusOr<uint64_t> Uint64(const std::string& name, uint64_t fallback) const;
  // A positive integer (> 0); InvalidArgument naming the flag otherwise.
  absl::StatusOr<int> PositiveInt(const std::string& name, int fallback) const;
  // A comma-separated list of positive integers ("1,4,16").
  absl::StatusOr<std::vector<int>> PositiveInts(const std::string& name,
                                                const std::vector<int>& fallback) const;
  // A comma-separated list of positive numbers ("192,57.5").
  absl::StatusOr<std::vector<double>> PositiveNumbers(const std::string& name,
                                                      const std::vector<double>& fallback) const;

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace hap
