#include "tests/telemetry/prom_parser.h"

#include <cmath>
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace hap::testing {
namespace {

bool IsNameStart(char c, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}
bool IsNameChar(char c, bool colon) { return IsNameStart(c, colon) || (c >= '0' && c <= '9'); }

// Go's strconv.ParseFloat as Prometheus uses it: decimal or exponent forms, Inf/NaN spellings.
std::optional<double> ParseFloat(const std::string& s) {
  if (s == "+Inf" || s == "Inf" || s == "+inf" || s == "inf") return INFINITY;
  if (s == "-Inf" || s == "-inf") return -INFINITY;
  if (s == "NaN" || s == "nan") return NAN;
  if (s.empty()) return std::nullopt;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) {
      return std::nullopt;
    }
  }
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

// The family a sample belongs to: histogram/summary suffixes map to their base name when that
// family was declared.
std::string FamilyOf(const std::string& sample, const std::map<std::string, PromFamily>& fams) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s(suffix);
    if (sample.size() > s.size() && sample.compare(sample.size() - s.size(), s.size(), s) == 0) {
      const std::string base = sample.substr(0, sample.size() - s.size());
      auto it = fams.find(base);
      if (it != fams.end() && (it->second.type == "histogram" || it->second.type == "summary")) {
        return base;
      }
    }
  }
  return sample;
}

absl::Status ParseSample(const std::string& line, PromSample* out) {
  size_t i = 0;
  if (i >= line.size() || !IsNameStart(line[i], true)) {
    return absl::InvalidArgumentError("sample does not start with a metric name");
  }
  while (i < line.size() && IsNameChar(line[i], true)) ++i;
  out->name = line.substr(0, i);
  if (i < line.size() && line[i] == '{') {
    ++i;
    for (;;) {
      while (i < line.size() && line[i] == ' ') ++i;
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      const size_t n0 = i;
      if (i >= line.size() || !IsNameStart(line[i], false)) {
        return absl::InvalidArgumentError("bad label name");
      }
      while (i < line.size() && IsNameChar(line[i], false)) ++i;
      const std::string label = line.substr(n0, i - n0);
      if (i >= line.size() || line[i] != '=') return absl::InvalidArgumentError("expected '='");
      ++i;
      if (i >= line.size() || line[i] != '"') return absl::InvalidArgumentError("expected '\"'");
      ++i;
      std::string value;
      for (;;) {
        if (i >= line.size()) return absl::InvalidArgumentError("unterminated label value");
        const char c = line[i++];
        if (c == '"') break;
        if (c == '\\') {
          if (i >= line.size()) return absl::InvalidArgumentError("dangling escape");
          const char e = line[i++];
          if (e == '\\') {
            value += '\\';
          } else if (e == '"') {
            value += '"';
          } else if (e == 'n') {
            value += '\n';
          } else {
            return absl::InvalidArgumentError(absl::StrCat("bad escape \\", std::string(1, e)));
          }
        } else {
          value += c;
        }
      }
      if (!out->labels.emplace(label, value).second) {
        return absl::InvalidArgumentError(absl::StrCat("duplicate label ", label));
      }
      while (i < line.size() && line[i] == ' ') ++i;
      if (i < line.size() && line[i] == ',') {
        ++i;
        continue;
      }
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      return absl::InvalidArgumentError("expected ',' or '}' in labels");
    }
  }
  if (i >= line.size() || line[i] != ' ') {
    return absl::InvalidArgumentError("expected a space before the value");
  }
  std::vector<std::string> rest = absl::StrSplit(line.substr(i + 1), ' ', absl::SkipEmpty());
  if (rest.empty() || rest.size() > 2) return absl::InvalidArgumentError("expected value [ts]");
  std::optional<double> v = ParseFloat(rest[0]);
  if (!v) return absl::InvalidArgumentError(absl::StrCat("bad value '", rest[0], "'"));
  out->value = *v;
  if (rest.size() == 2) {
    for (char c : rest[1]) {
      if (!((c >= '0' && c <= '9') || c == '-')) {
        return absl::InvalidArgumentError("bad timestamp");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckHistogram(const PromFamily& f) {
  // Group by the labels other than le.
  struct Series {
    std::vector<std::pair<double, double>> buckets;  // (le, count) in order of appearance
    std::optional<double> sum, count;
  };
  std::map<std::map<std::string, std::string>, Series> series;
  for (const PromSample& s : f.samples) {
    std::map<std::string, std::string> key = s.labels;
    if (s.name == f.name + "_bucket") {
      auto le = key.find("le");
      if (le == key.end()) return absl::InvalidArgumentError(f.name + ": bucket without le");
      std::optional<double> bound = ParseFloat(le->second);
      if (!bound) return absl::InvalidArgumentError(f.name + ": bad le " + le->second);
      key.erase(le);
      series[key].buckets.emplace_back(*bound, s.value);
    } else if (s.name == f.name + "_sum") {
      series[key].sum = s.value;
    } else if (s.name == f.name + "_count") {
      series[key].count = s.value;
    } else {
      return absl::InvalidArgumentError(f.name + ": unexpected sample " + s.name);
    }
  }
  for (const auto& [labels, s] : series) {
    if (s.buckets.empty() || !std::isinf(s.buckets.back().first)) {
      return absl::InvalidArgumentError(f.name + ": no +Inf bucket (last)");
    }
    for (size_t i = 1; i < s.buckets.size(); ++i) {
      if (!(s.buckets[i].first > s.buckets[i - 1].first)) {
        return absl::InvalidArgumentError(f.name + ": le not ascending");
      }
      if (s.buckets[i].second < s.buckets[i - 1].second) {
        return absl::InvalidArgumentError(f.name + ": bucket counts not cumulative");
      }
    }
    if (!s.sum || !s.count) return absl::InvalidArgumentError(f.name + ": missing _sum/_count");
    if (*s.count != s.buckets.back().second) {
      return absl::InvalidArgumentError(f.name + ": _count differs from the +Inf bucket");
    }
  }
  return absl::OkStatus();
}

bool Includes(const std::map<std::string, std::string>& have,
              const std::map<std::string, std::string>& want) {
  for (const auto& [k, v] : want) {
    auto it = have.find(k);
    if (it == have.end() || it->second != v) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<PromExposition> PromExposition::Parse(const std::string& text) {
  PromExposition out;
  std::set<std::string> closed;  // families whose samples ended (a later sample is an error)
  std::set<std::string> series_seen;
  std::string current;
  int line_no = 0;
  if (!text.empty() && text.back() != '\n') {
    return absl::InvalidArgumentError("exposition does not end with a newline");
  }
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_no;
    const std::string line(raw);
    auto fail = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": ", why, ": ", line));
    };
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 3));
      if (parts.size() >= 3 && (parts[1] == "HELP" || parts[1] == "TYPE")) {
        const std::string& name = parts[2];
        if (name.empty() || !IsNameStart(name[0], true)) return fail("bad metric name");
        for (char c : name) {
          if (!IsNameChar(c, true)) return fail("bad metric name");
        }
        PromFamily& f = out.families_[name];
        f.name = name;
        if (parts[1] == "TYPE") {
          if (parts.size() != 4) return fail("TYPE without a type");
          static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                       "untyped"};
          if (!kTypes.count(parts[3])) return fail("unknown type");
          if (!f.samples.empty()) return fail("TYPE after samples");
          f.type = parts[3];
        } else {
          f.help = parts.size() == 4 ? parts[3] : "";
        }
        if (current != name) {
          if (!current.empty()) closed.insert(current);
          if (closed.count(name)) return fail("family declared again after others");
          current = name;
        }
      }
      continue;
    }
    PromSample s;
    if (absl::Status st = ParseSample(line, &s); !st.ok()) return fail(std::string(st.message()));
    const std::string fam = FamilyOf(s.name, out.families_);
    if (fam != current) {
      if (!current.empty()) closed.insert(current);
      if (closed.count(fam)) return fail("family split by another");
      current = fam;
    }
    PromFamily& f = out.families_[fam];
    f.name = fam;
    std::string key = s.name;
    for (const auto& [k, v] : s.labels) key += "\x1f" + k + "=" + v;
    if (!series_seen.insert(key).second) return fail("duplicate series");
    if (f.type == "counter" && (s.value < 0 || std::isnan(s.value))) {
      return fail("counter value is negative or NaN");
    }
    f.samples.push_back(std::move(s));
  }
  for (const auto& [name, f] : out.families_) {
    if (f.type == "histogram") {
      if (absl::Status st = CheckHistogram(f); !st.ok()) return st;
    }
  }
  return out;
}

const PromFamily* PromExposition::family(const std::string& name) const {
  auto it = families_.find(name);
  return it == families_.end() ? nullptr : &it->second;
}

std::optional<double> PromExposition::Value(
    const std::string& name, const std::map<std::string, std::string>& labels) const {
  for (const auto& [fname, f] : families_) {
    for (const PromSample& s : f.samples) {
      if (s.name == name && Includes(s.labels, labels)) return s.value;
    }
  }
  return std::nullopt;
}

double PromExposition::Sum(const std::string& name,
                           const std::map<std::string, std::string>& labels) const {
  double total = 0;
  for (const auto& [fname, f] : families_) {
    for (const PromSample& s : f.samples) {
      if (s.name == name && Includes(s.labels, labels)) total += s.value;
    }
  }
  return total;
}

}  // namespace hap::testing
