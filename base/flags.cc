#include "base/flags.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace hap {

namespace {

// A flag's value as read by read(text, out), which is false for text that is not one; the
// fallback when the flag is absent, else InvalidArgument "--<name>: '<text>' is not <what>".
template <typename T, typename Read>
absl::StatusOr<T> ReadFlag(const std::optional<std::string>& v, const std::string& name,
                           const T& fallback, const char* what, Read read) {
  if (!v) return fallback;
  T out{};
  if (!read(*v, out)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": '", *v, "' is not ", what));
  }
  return out;
}

// A comma-separated list whose every part read(part, x) accepts.
template <typename T, typename Read>
auto ListOf(Read read) {
  return [read](const std::string& text, std::vector<T>& out) {
    for (absl::string_view part : absl::StrSplit(text, ',')) {
      T x{};
      if (!read(part, x)) return false;
      out.push_back(x);
    }
    return true;
  };
}

bool ReadPositiveInt(absl::string_view text, int& x) { return absl::SimpleAtoi(text, &x) && x > 0; }

bool ReadPositiveNumber(absl::string_view text, double& x) {
  return absl::SimpleAtod(text, &x) && x > 0 && std::isfinite(x);
}

}  // namespace

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
  return ReadFlag(Get(name), name, fallback, "an integer",
                  [](const std::string& v, int64_t& out) { return absl::SimpleAtoi(v, &out); });
}

absl::StatusOr<uint64_t> Flags::Uint64(const std::string& name, uint64_t fallback) const {
  return ReadFlag(Get(name), name, fallback, "a non-negative integer",
                  [](const std::string& v, uint64_t& out) { return absl::SimpleAtoi(v, &out); });
}

absl::StatusOr<double> Flags::Double(const std::string& name, double fallback) const {
  return ReadFlag(Get(name), name, fallback, "a number",
                  [](const std::string& v, double& out) { return absl::SimpleAtod(v, &out); });
}

absl::StatusOr<Flags> Flags::Parse(int argc, char** argv, const std::set<std::string>& value_flags,
                                   const std::set<std::string>& bool_flags) {
  return Parse(std::vector<std::string>(argv + (argc > 0 ? 1 : 0), argv + argc), value_flags,
               bool_flags);
}

absl::StatusOr<int> Flags::PositiveInt(const std::string& name, int fallback) const {
  return ReadFlag(Get(name), name, fallback, "a positive integer", ReadPositiveInt);
}

absl::StatusOr<std::vector<int>> Flags::PositiveInts(const std::string& name,
                                                     const std::vector<int>& fallback) const {
  return ReadFlag(Get(name), name, fallback, "a comma-separated list of positive integers",
                  ListOf<int>(ReadPositiveInt));
}

absl::StatusOr<std::vector<double>> Flags::PositiveNumbers(
    const std::string& name, const std::vector<double>& fallback) const {
  return ReadFlag(Get(name), name, fallback, "a comma-separated list of positive numbers",
                  ListOf<double>(ReadPositiveNumber));
}

}  // namespace hap
