// Row normalisations: RMSNorm (LLaMA) and LayerNorm (CLIP).
#pragma once

#include "absl/status/status.h"

namespace hap::cpu {

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) · w.  x, y F32 [rows, d]; y may alias x.
absl::Status RmsNorm(const float* x, const float* w, float* y, int rows, int d, float eps);

// y[r, :] = (x[r, :] − mean) / sqrt(var + eps) · w + b (biased variance). y may alias x.
absl::Status LayerNorm(const float* x, const float* w, const float* b, float* y, int rows, int d,
                       float eps);

}  // namespace hap::cpu
