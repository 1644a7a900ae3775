#include "tools/hapctl/flags.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace hap::cli {

absl::StatusOr<Flags> Flags::Parse(const std::vector<std::string>& args,
                                   const std::set<std::string>& value_flags,
                                   const std::set<std::string>& bool_flags) {
  Flags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (bool_flags.count(name)) {
      if (value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      flags.values_[name] = "true";
    } else if (value_flags.count(name)) {
      if (!value) {
        if (i + 1 >= args.size()) {
          return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
        }
        value = args[++i];
      }
      flags.values_[name] = *value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
  }
  return flags;
}

std::optional<std::string> Flags::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Flags::GetOr(const std::string& name, const std::string& fallback) const {
  auto v = Get(name);
  return v ? *v : fallback;
}

absl::StatusOr<std::string> Flags::Required(const std::string& name) const {
  auto v = Get(name);
  if (!v) return absl::InvalidArgumentError(absl::StrCat("--", name, " is required"));
  return *v;
}

absl::StatusOr<int64_t> Flags::Int(const std::string& name, int64_t fallback) const {
  auto v = Get(name);
  if (!v) return fallback;
  int64_t out;
  if (!absl::SimpleAtoi(*v, &out)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": '", *v, "' is not an integer"));
  }
  return out;
}

absl::StatusOr<uint64_t> Flags::Uint64(const std::string& name, uint64_t fallback) const {
  auto v = Get(name);
  if (!v) return fallback;
  uint64_t out;
  if (!absl::SimpleAtoi(*v, &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": '", *v, "' is not a non-negative integer"));
  }
  return out;
}

absl::StatusOr<double> Flags::Double(const std::string& name, double fallback) const {
  auto v = Get(name);
  if (!v) return fallback;
  double out;
  if (!absl::SimpleAtod(*v, &out)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": '", *v, "' is not a number"));
  }
  return out;
}

std::string DeviceFlag(const Flags& flags) {
  if (auto v = flags.Get("device")) return *v;
  const char* env = std::getenv("HAP_DEVICE");
  return env != nullptr && *env != '\0' ? env : "cpu";
}

int Fail(const std::string& command, const absl::Status& status) {
  std::fprintf(stderr, "hapctl %s: %s\n", command.c_str(), std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace hap::cli
