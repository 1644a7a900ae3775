#include "runtime/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"

namespace hap {
absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.f) {
    return absl::InvalidArgumentError(
        absl::StrFormat("temperature must be a finite number >= 0, got %g", p.temperature));
  }
  if (!(p.top_p > 0.f && p.top_p <= 1.f)) {
    return absl::InvalidArgumentError(absl::StrFormat("top_p must be in (0, 1], got %g", p.top_p));
  }
  if (p.top_k < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("top_k must be >= 0, got %d", p.top_k));
  }
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

void Sampler::Discard(int n) {
  if (params_.temperature == 0.f) return;
  for (int i = 0; i < n; ++i) rng_.Uniform();
}

int32_t Sampler::Sample(const std::vector<float>& logits) {
  const int n = static_cast<int>(logits.size());
  if (params_.temperature == 0.f) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates sorted by logit (descending; ties → lower id), cut to top_k.
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  const int k = params_.top_k > 0 ? std::min(params_.top_k, n) : n;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  order.resize(k);
  std::vector<double> probs(k);
  const double mx = logits[order[0]];
  double sum = 0;
  for (int i = 0; i < k; ++i) {
    probs[i] = std::exp((logits[order[i]] - mx) / params_.temperature);
    sum += probs[i];
  }
  // Nucleus: the smallest prefix whose mass reaches top_p.
  int keep = k;
  if (params_.top_p < 1.f) {
    double acc = 0;
    for (int i = 0; i < k; ++i) {
      acc += probs[i] / sum;
      if (acc >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept_sum = 0;
  for (int i = 0; i < keep; ++i) kept_sum += probs[i];
  double u = rng_.Uniform() * kept_sum;
  for (int i = 0; i < keep; ++i) {
    u -= probs[i];
    if (u < 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace hap
