// A small flag parser for hapctl: `--name value`, `--name=value` and boolean `--name`.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hap::cli {

class Flags {
 public:
  // `value_flags` take a value; `bool_flags` do not. Anything else is an error naming the flag.
  static absl::StatusOr<Flags> Parse(const std::vector<std::string>& args,
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

 private:
  std::map<std::string, std::string> values_;
};

// --device, else $HAP_DEVICE, else "cpu": the compute backend (runtime/device).
std::string DeviceFlag(const Flags& flags);

// Prints "hapctl <cmd>: <status message>" to stderr and returns the exit code for it (2 for
// invalid arguments, 1 otherwise).
int Fail(const std::string& command, const absl::Status& status);

}  // namespace hap::cli
