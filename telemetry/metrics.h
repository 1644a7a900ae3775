// Counters, gauges and histograms with labels, and their Prometheus text exposition (format
// 0.0.4). Updates are lock-free atomics (a child is looked up under a mutex once and then kept
// by the caller), so recording from a request path is cheap; Render() runs per scrape.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hap::telemetry {

inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

class Counter {
 public:
  void Inc(double v = 1);  // v ≥ 0; negative increments are ignored
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Inc(double v = 1);
  void Dec(double v = 1) { Inc(-v); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // upper bounds, ascending; +Inf is implied
  void Observe(double v);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // [bounds + 1]; the last is the +Inf bucket = count
    double sum = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // [bounds + 1], per bucket
  std::atomic<double> sum_{0};
};

// Bucket bounds: start, start·factor, ... (count of them).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// One metric name with its label names; a child per distinct label-value tuple.
template <class M>
class Family {
 public:
  Family(std::vector<std::string> label_names, std::function<std::unique_ptr<M>()> make)
      : label_names_(std::move(label_names)), make_(std::move(make)) {}

  // The child for these label values (as many as label names); created on first use. The
  // reference stays valid for the life of the family.
  M& Labels(const std::vector<std::string>& values) {
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<M>& m = children_[values];
    if (m == nullptr) m = make_();
    return *m;
  }
  M& Get() { return Labels({}); }  // the unlabelled child

  const std::vector<std::string>& label_names() const { return label_names_; }
  template <class F>
  void ForEach(F f) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [values, m] : children_) f(values, *m);
  }

 private:
  const std::vector<std::string> label_names_;
  const std::function<std::unique_ptr<M>()> make_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> children_;
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

class Registry {
 public:
  static Registry& Default();  // the process's registry, what /metrics serves

  // Adding a name twice returns the first family (same type) — or aborts on a type clash, which
  // is a programming error. Names follow Prometheus ([a-zA-Z_:][a-zA-Z0-9_:]*); counters end in
  // _total.
  CounterFamily& AddCounter(const std::string& name, const std::string& help,
                            std::vector<std::string> label_names = {});
  GaugeFamily& AddGauge(const std::string& name, const std::string& help,
                        std::vector<std::string> label_names = {});
  HistogramFamily& AddHistogram(const std::string& name, const std::string& help,
                                std::vector<double> bounds,
                                std::vector<std::string> label_names = {});
  // Read at every scrape (values kept elsewhere: queue lengths, exporter counters).
  void AddCallbackGauge(const std::string& name, const std::string& help,
                        std::function<double()> read);
  void AddCallbackCounter(const std::string& name, const std::string& help,
                          std::function<double()> read);

  std::string Render() const;  // Prometheus text exposition, families in registration order

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Entry {
    std::string name, help;
    Type type;
    std::unique_ptr<CounterFamily> counter;
    std::unique_ptr<GaugeFamily> gauge;
    std::unique_ptr<HistogramFamily> histogram;
    std::function<double()> callback;  // callback counters and gauges
  };
  Entry* Find(const std::string& name, Type type);
  Entry& Add(const std::string& name, const std::string& help, Type type);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;
};

// Text exposition helpers (exposed for tests).
std::string FormatValue(double v);                   // shortest round trip; +Inf, -Inf, NaN
std::string EscapeLabelValue(const std::string& v);  // \\, \", \n
std::string EscapeHelp(const std::string& v);        // \\, \n

}  // namespace hap::telemetry
