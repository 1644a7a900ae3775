// Order statistics of timing samples, shared by the benchmark programs.
#pragma once

#include <algorithm>
#include <vector>

namespace hap::bench {

// The sample at rank floor(p · n) of the sorted samples (p in [0, 1]); 0 for none.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

inline double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

}  // namespace hap::bench
