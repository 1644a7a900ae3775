// Token sampling: greedy, or temperature with top-k / top-p, reproducible from a seed.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "base/rng.h"

namespace hap {

struct SamplingParams {
  float temperature = 0.f;  // 0 → greedy (argmax; ties → lowest id)
  float top_p = 1.f;        // nucleus mass in (0, 1]
  int top_k = 0;            // 0 → no limit
  uint64_t seed = 0;
};

// Checks ranges: temperature ≥ 0 and finite, top_p in (0, 1], top_k ≥ 0.
absl::Status ValidateSamplingParams(const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // logits F32 [vocab] → token id. Deterministic for a given seed and sequence of calls.
  //   greedy: std::max_element (the first largest);
  //   otherwise: the top_k largest logits (all when 0) in order (value descending, ties to the
  //   lower id), p_i = exp((x_i − x_0) / T) in F64, the smallest prefix whose mass reaches top_p,
  //   and the token where one uniform draw (the only draw) lands in that prefix's mass.
  int32_t Sample(const std::vector<float>& logits);
  int32_t Sample(const float* logits, int vocab);
  // Advances the random stream as `n` Sample() calls would (each non-greedy call draws exactly
  // one number), so a sampler continued in another process stays identical.
  void Discard(int n);

  // --- Sampling from what a device sends back (runtime/model/row_sampling.h) -----------------
  // What Sample() needs of a row of `vocab` logits:
  //   kArgMax: its argmax (greedy);
  //   kTop: its TopCount(vocab) largest logits in order, plus the row's softmax denominator
  //     (TopLogitsArgs::row_sum) when those are fewer than the top-k set (top_k = 0 or ≥ vocab);
  //   kRow: the row itself (top_k between kMaxTopLogits and vocab: no bounded candidate set).
  enum class Need { kArgMax, kTop, kRow };
  Need Needs(int vocab) const;
  int TopCount(int vocab) const;  // for kTop: min(top_k or vocab, vocab, kMaxTopLogits)
  // For kTop: whether FromTop needs the row's softmax denominator (its top-k set is larger than
  // the candidates: top_k = 0 or ≥ vocab, vocab > kMaxTopLogits).
  bool NeedsRowSum(int vocab) const { return TopSet(vocab) > TopCount(vocab); }
  float temperature() const { return params_.temperature; }
  // The one random number a non-greedy Sample() draws.
  double Draw() { return rng_.Uniform(); }
  // The token Sample() returns for a row known by its `count` largest logits (values descending,
  // ties to the lower id; ids theirs) out of `vocab`, with `draw` from Draw(); −1 when these do
  // not decide it. When count covers the top-k set the result is exact by construction (the
  // same arithmetic on the same numbers). Otherwise `row_sum` (the device's F64 sum over the
  // row, in another order than Sample's) stands in for Sample's sum, and the answer is given only
  // where the nucleus cut and the draw's landing lie farther than a bound on that difference
  // from a boundary (8·(vocab + count + 16)·2⁻⁵³ of the mass, about 4 times the worst case of the
  // rounding): else, or when the nucleus or the draw reaches past the candidates, −1, and the
  // caller runs SampleRow on the row with the same draw.
  int32_t FromTop(const float* values, const int32_t* ids, int count, int vocab, double row_sum,
                  double draw) const;
  // Sample() of a row with the draw already taken (non-greedy).
  int32_t SampleRow(const float* logits, int vocab, double draw) const;

 private:
  // Sample()'s arithmetic on the top `count` of the row's `top` largest logits (top = its top-k
  // set: min(top_k or vocab, vocab)); FromTop's contract.
  int32_t Pick(const float* values, const int32_t* ids, int count, int top, int vocab,
               double row_sum, double draw) const;
  int TopSet(int vocab) const;

  SamplingParams params_;
  Rng rng_;  // xoshiro256**: the same draws on every platform
};

}  // namespace hap
