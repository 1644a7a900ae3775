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
  int32_t Sample(const std::vector<float>& logits);
  // Advances the random stream as `n` Sample() calls would (each non-greedy call draws exactly
  // one number), so a sampler continued in another process stays identical.
  void Discard(int n);

 private:
  SamplingParams params_;
  Rng rng_;  // xoshiro256**: the same draws on every platform
};

}  // namespace hap
