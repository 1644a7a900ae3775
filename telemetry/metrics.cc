#include "telemetry/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace hap::telemetry {
namespace {

void AtomicAdd(std::atomic<double>* a, double v) {
  double cur = a->load(std::memory_order_relaxed);
  while (!a->compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

bool ValidName(const std::string& n, bool colon_ok) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (colon_ok && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

void CheckNames(const std::string& name, const std::vector<std::string>& labels) {
  bool ok = ValidName(name, true);
  for (const std::string& l : labels) ok = ok && ValidName(l, false) && l.rfind("__", 0) != 0;
  if (!ok) {
    std::fprintf(stderr, "metrics: invalid metric or label name '%s'\n", name.c_str());
    std::abort();
  }
}

std::string LabelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     const char* extra_name = nullptr, const std::string& extra_value = "") {
  if (names.empty() && extra_name == nullptr) return "";
  std::string out = "{";
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i] + "=\"" + EscapeLabelValue(values[i]) + "\"";
  }
  if (extra_name != nullptr) {
    if (!names.empty()) out += ',';
    out += std::string(extra_name) + "=\"" + EscapeLabelValue(extra_value) + "\"";
  }
  return out + "}";
}

}  // namespace

void Counter::Inc(double v) {
  if (v > 0) AtomicAdd(&value_, v);
}

void Gauge::Inc(double v) { AtomicAdd(&value_, v); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_([&] {
        std::sort(bounds.begin(), bounds.end());
        bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
        return bounds;
      }()),
      counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double v) {
  // The first bucket whose upper bound is ≥ v ("le" is inclusive); NaN goes to +Inf.
  const size_t i = std::isnan(v)
                       ? bounds_.size()
                       : static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) -
                                             bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(&sum_, v);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t acc = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    acc += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = acc;
  }
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

namespace {

// The text format's escaping: backslash and newline everywhere, the double quote only inside a
// label value (HELP text keeps its quotes as written).
std::string Escape(const std::string& v, bool quote) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string EscapeLabelValue(const std::string& v) { return Escape(v, /*quote=*/true); }

std::string EscapeHelp(const std::string& v) { return Escape(v, /*quote=*/false); }

Registry& Registry::Default() {
  static auto* r = new Registry();  // lives for the process; scrapes may run at exit
  return *r;
}

Registry::Entry* Registry::Find(const std::string& name, Type type) {
  for (auto& e : entries_) {
    if (e->name != name) continue;
    if (e->type != type) {
      std::fprintf(stderr, "metrics: '%s' registered twice with different types\n", name.c_str());
      std::abort();
    }
    return e.get();
  }
  return nullptr;
}

Registry::Entry& Registry::Add(const std::string& name, const std::string& help, Type type) {
  entries_.push_back(std::make_unique<Entry>());
  Entry& e = *entries_.back();
  e.name = name;
  e.help = help;
  e.type = type;
  return e;
}

CounterFamily& Registry::AddCounter(const std::string& name, const std::string& help,
                                    std::vector<std::string> label_names) {
  CheckNames(name, label_names);
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = Find(name, Type::kCounter); e != nullptr && e->counter) return *e->counter;
  Entry& e = Add(name, help, Type::kCounter);
  e.counter = std::make_unique<CounterFamily>(std::move(label_names),
                                              [] { return std::make_unique<Counter>(); });
  return *e.counter;
}

GaugeFamily& Registry::AddGauge(const std::string& name, const std::string& help,
                                std::vector<std::string> label_names) {
  CheckNames(name, label_names);
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = Find(name, Type::kGauge); e != nullptr && e->gauge) return *e->gauge;
  Entry& e = Add(name, help, Type::kGauge);
  e.gauge = std::make_unique<GaugeFamily>(std::move(label_names),
                                          [] { return std::make_unique<Gauge>(); });
  return *e.gauge;
}

HistogramFamily& Registry::AddHistogram(const std::string& name, const std::string& help,
                                        std::vector<double> bounds,
                                        std::vector<std::string> label_names) {
  CheckNames(name, label_names);
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = Find(name, Type::kHistogram); e != nullptr && e->histogram) return *e->histogram;
  Entry& e = Add(name, help, Type::kHistogram);
  e.histogram = std::make_unique<HistogramFamily>(
      std::move(label_names), [bounds] { return std::make_unique<Histogram>(bounds); });
  return *e.histogram;
}

void Registry::AddCallbackGauge(const std::string& name, const std::string& help,
                                std::function<double()> read) {
  CheckNames(name, {});
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = Find(name, Type::kGauge);
  if (e == nullptr) e = &Add(name, help, Type::kGauge);
  e->callback = std::move(read);
}

void Registry::AddCallbackCounter(const std::string& name, const std::string& help,
                                  std::function<double()> read) {
  CheckNames(name, {});
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = Find(name, Type::kCounter);
  if (e == nullptr) e = &Add(name, help, Type::kCounter);
  e->callback = std::move(read);
}

std::string Registry::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& e : entries_) {
    const char* type = e->type == Type::kCounter ? "counter"
                       : e->type == Type::kGauge ? "gauge"
                                                 : "histogram";
    out += "# HELP " + e->name + " " + EscapeHelp(e->help) + "\n";
    out += "# TYPE " + e->name + " " + type + "\n";
    if (e->callback) {
      out += e->name + " " + FormatValue(e->callback()) + "\n";
    } else if (e->counter) {
      e->counter->ForEach([&](const std::vector<std::string>& values, const Counter& c) {
        out += e->name + LabelSet(e->counter->label_names(), values) + " " +
               FormatValue(c.value()) + "\n";
      });
    } else if (e->gauge) {
      e->gauge->ForEach([&](const std::vector<std::string>& values, const Gauge& g) {
        out += e->name + LabelSet(e->gauge->label_names(), values) + " " + FormatValue(g.value()) +
               "\n";
      });
    } else if (e->histogram) {
      const auto& names = e->histogram->label_names();
      e->histogram->ForEach([&](const std::vector<std::string>& values, const Histogram& h) {
        const Histogram::Snapshot s = h.snapshot();
        for (size_t i = 0; i <= s.bounds.size(); ++i) {
          const std::string le = i < s.bounds.size() ? FormatValue(s.bounds[i]) : "+Inf";
          out += e->name + "_bucket" + LabelSet(names, values, "le", le) + " " +
                 FormatValue(static_cast<double>(s.cumulative[i])) + "\n";
        }
        out += e->name + "_sum" + LabelSet(names, values) + " " + FormatValue(s.sum) + "\n";
        out += e->name + "_count" + LabelSet(names, values) + " " +
               FormatValue(static_cast<double>(s.cumulative.back())) + "\n";
      });
    }
  }
  return out;
}

}  // namespace hap::telemetry
