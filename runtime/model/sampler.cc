#include "runtime/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"

namespace hap {
namespace {

uint64_t SplitMix64(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

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

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  uint64_t s = params.seed;
  for (uint64_t& word : state_) word = SplitMix64(&s);
}

double Sampler::NextUniform() {
  const uint64_t result = Rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = Rotl(state_[3], 45);
  return static_cast<double>(result >> 11) * 0x1.0p-53;
}

void Sampler::Discard(int n) {
  if (params_.temperature == 0.f) return;
  for (int i = 0; i < n; ++i) NextUniform();
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
  double u = NextUniform() * kept_sum;
  for (int i = 0; i < keep; ++i) {
    u -= probs[i];
    if (u < 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace hap
