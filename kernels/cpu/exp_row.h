// The exponent pass of a softmax row, shared by the attention kernels so that prefill and
// decode attention normalise in the same way.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

namespace hap::cpu {

struct ExpRowResult {
  float max;   // the row's maximum, subtracted before exp
  double sum;  // Σ_j exp(s_j − max), summed in F64
};

// s_j ← exp(s_j − max) for j < n, in place.
inline ExpRowResult ExpRow(float* s, int n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < n; ++j) mx = std::max(mx, s[j]);
  double sum = 0;
  for (int j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  return {mx, sum};
}

}  // namespace hap::cpu
