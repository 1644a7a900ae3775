// PAQ-softmax weights (docs/design.md §3): centre the candidates' PAQ scores on their mean and take
// the softmax, so candidates with higher PAQ dominate the aggregated map.
#pragma once

#include "absl/status/status.h"

namespace hap::kernels {

// s_c = PAQ_c − mean(PAQ), w_c = exp(s_c) / Σ_c' exp(s_c').
//   paq: F32 [n]   weights: F32 [n] (sums to 1)
// InvalidArgument on n ≤ 0, null pointers or a non-finite PAQ.
absl::Status PaqSoftmaxWeights(const float* paq, int n, float* weights);

}  // namespace hap::kernels
