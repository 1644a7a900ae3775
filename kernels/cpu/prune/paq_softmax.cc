// CPU reference of PaqSoftmaxWeights (in double: n is a head or layer count, at most ~100).
#include "kernels/cpu/prune/paq_softmax.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace hap::kernels {

absl::Status PaqSoftmaxWeights(const float* paq, int n, float* weights) {
  return PaqSoftmaxWeights(paq, n, 1.0, weights);
}

absl::Status PaqSoftmaxWeights(const float* paq, int n, double temperature, float* weights) {
  if (paq == nullptr || weights == nullptr || n <= 0) {
    return absl::InvalidArgumentError("PaqSoftmaxWeights: null pointer or n <= 0");
  }
  if (!std::isfinite(temperature) || !(temperature > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PaqSoftmaxWeights: temperature ", temperature, " is not a finite positive number"));
  }
  double mean = 0.0;
  for (int c = 0; c < n; ++c) {
    if (!std::isfinite(paq[c])) {
      return absl::InvalidArgumentError(absl::StrCat("PaqSoftmaxWeights: PAQ ", c, " is ", paq[c]));
    }
    mean += paq[c];
  }
  mean /= n;
  // Centring does not change the softmax; subtracting the max as well keeps exp() in range for
  // callers that pass unbounded scores.
  // s_c = (PAQ_c − mean) / τ; τ = 1 divides exactly, so the weights are the paper's bit for bit.
  double mx = -1e300;
  for (int c = 0; c < n; ++c) mx = std::max(mx, (paq[c] - mean) / temperature);
  std::vector<double> e(n);
  double sum = 0.0;
  for (int c = 0; c < n; ++c) {
    e[c] = std::exp((paq[c] - mean) / temperature - mx);
    sum += e[c];
  }
  for (int c = 0; c < n; ++c) weights[c] = static_cast<float>(e[c] / sum);
  return absl::OkStatus();
}

}  // namespace hap::kernels
