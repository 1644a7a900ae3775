// Order statistics of timing samples, shared by the benchmark programs.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace hap::bench {

// The sample at rank floor(p · n) of the sorted samples (p in [0, 1]); 0 for none.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

inline double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

// The median time of `repeats` runs of `fn` after one warm-up run, in microseconds.
inline double MedianUs(int repeats, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return Median(std::move(t));
}

}  // namespace hap::bench
