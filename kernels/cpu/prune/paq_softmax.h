// PAQ-softmax weights (docs/design.md §3): centre the candidates' PAQ scores on their mean and take
// the softmax, so candidates with higher PAQ dominate the aggregated map. An optional temperature
// τ (an extension beyond the paper; τ = 1 is its definition) sharpens (τ < 1) or flattens (τ > 1)
// the weights.
#pragma once

#include "absl/status/status.h"

namespace hap::kernels {

// s_c = (PAQ_c − mean(PAQ)) / τ, w_c = exp(s_c) / Σ_c' exp(s_c').
//   paq: F32 [n]   weights: F32 [n] (sums to 1)   temperature: τ, finite and > 0
// τ = 1 gives exactly (bit for bit) the 3-argument form's weights: dividing by 1 is exact.
// InvalidArgument on n ≤ 0, null pointers, a non-finite PAQ or a τ that is not finite and > 0.
// (Requests restrict τ further to [kMinPaqTemperature, kMaxPaqTemperature], runtime/prune/
// factory.h; the op itself takes any positive τ.)
absl::Status PaqSoftmaxWeights(const float* paq, int n, double temperature, float* weights);
// τ = 1 (the paper's PAQ-softmax).
absl::Status PaqSoftmaxWeights(const float* paq, int n, float* weights);

}  // namespace hap::kernels
