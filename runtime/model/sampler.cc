#include "runtime/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"
#include "kernels/op_args.h"

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
  return Sample(logits.data(), static_cast<int>(logits.size()));
}

int32_t Sampler::Sample(const float* logits, int vocab) {
  if (params_.temperature == 0.f) {
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  }
  return SampleRow(logits, vocab, rng_.Uniform());
}

int Sampler::TopSet(int vocab) const {
  return params_.top_k > 0 ? std::min(params_.top_k, vocab) : vocab;
}

Sampler::Need Sampler::Needs(int vocab) const {
  if (params_.temperature == 0.f) return Need::kArgMax;
  const int top = TopSet(vocab);
  return top <= kMaxTopLogits || top == vocab ? Need::kTop : Need::kRow;
}

int Sampler::TopCount(int vocab) const { return std::min(TopSet(vocab), kMaxTopLogits); }

int32_t Sampler::SampleRow(const float* logits, int vocab, double draw) const {
  // Candidates sorted by logit (descending; ties → lower id), cut to top_k.
  const int top = TopSet(vocab);
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<float> values(top);
  std::vector<int32_t> ids(top);
  for (int i = 0; i < top; ++i) {
    values[i] = logits[order[i]];
    ids[i] = order[i];
  }
  return Pick(values.data(), ids.data(), top, top, vocab, 0.0, draw);
}

int32_t Sampler::FromTop(const float* values, const int32_t* ids, int count, int vocab,
                         double row_sum, double draw) const {
  if (count < 1 || params_.temperature == 0.f) return -1;
  return Pick(values, ids, count, TopSet(vocab), vocab, row_sum, draw);
}

int32_t Sampler::Pick(const float* values, const int32_t* ids, int count, int top, int vocab,
                      double row_sum, double draw) const {
  // exact: the candidates are the whole top-k set, and this is Sample's arithmetic on them.
  const bool exact = count >= top;
  const int m = exact ? top : count;
  std::vector<double> probs(m);
  const double mx = values[0];
  for (int i = 0; i < m; ++i) probs[i] = std::exp((values[i] - mx) / params_.temperature);
  double sum = 0;
  // Otherwise the device's row_sum stands in for Sample's sum over the top-k set (the row): each
  // term within 1 ulp of the host's exp, summed in another order. Sample's nucleus prefix sums
  // and draw then differ from the ones below by at most (vocab + 2·count + 18)·2⁻⁵³ of the mass;
  // `margin` is about 4 times that, and a decision closer to a boundary than it is left to
  // SampleRow.
  double margin = 0;
  if (exact) {
    for (int i = 0; i < top; ++i) sum += probs[i];
  } else {
    if (!(row_sum > 0 && row_sum < INFINITY)) return -1;  // a NaN or inf logit: no bound holds
    sum = row_sum;
    margin = 8.0 * (static_cast<double>(vocab) + count + 16) * 0x1p-53;
  }
  // Nucleus: the smallest prefix whose mass reaches top_p.
  int keep = top;
  if (params_.top_p < 1.f) {
    double acc = 0;
    for (int i = 0; i < m; ++i) {
      const double before = acc;
      acc += probs[i] / sum;
      if (acc >= params_.top_p) {
        if (!exact && (acc < params_.top_p + margin || before >= params_.top_p - margin)) {
          return -1;
        }
        keep = i + 1;
        break;
      }
    }
    if (keep > m) return -1;  // the nucleus reaches past the candidates
  }
  if (keep <= m) {
    double kept_sum = 0;
    for (int i = 0; i < keep; ++i) kept_sum += probs[i];
    double u = draw * kept_sum;
    for (int i = 0; i < keep; ++i) {
      u -= probs[i];
      if (u < 0) return ids[i];
    }
    return ids[keep - 1];
  }
  // The whole row is the nucleus (top_p = 1, no top_k): Sample's kept sum is its sum, for which
  // row_sum stands in; the draw must land clear of the boundaries within the candidates.
  double u = draw * sum;
  const double slack = margin * sum;
  for (int i = 0; i < m; ++i) {
    const double before = u;
    u -= probs[i];
    if (u < 0) return u <= -slack && before >= slack ? ids[i] : -1;
  }
  return -1;
}

}  // namespace hap
