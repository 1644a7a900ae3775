// Dense matrix products on the CPU (OpenBLAS sgemm/sgemv).
#pragma once

#include "absl/status/status.h"

namespace hap::cpu {

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]); w in the Hugging Face Linear layout [out, in].
// bias may be null. y must not alias x.
absl::Status Linear(const float* x, const float* w, const float* bias, float* y, int m, int k,
                    int n);

// Plain reference of Linear (triple loop, double accumulation) for tests.
void LinearReference(const float* x, const float* w, const float* bias, float* y, int m, int k,
                     int n);

}  // namespace hap::cpu
