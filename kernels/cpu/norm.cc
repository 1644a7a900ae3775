#include "kernels/cpu/norm.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "base/thread_pool.h"

namespace hap::cpu {

absl::Status RmsNorm(const float* x, const float* w, float* y, int rows, int d, float eps) {
  if (rows < 0 || d <= 0) return absl::InvalidArgumentError(absl::StrFormat("RmsNorm: rows=%d d=%d", rows, d));
  DefaultPool().ParallelFor(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * d;
      float* yr = y + r * d;
      double ss = 0;
      for (int i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / d + eps));
      for (int i = 0; i < d; ++i) yr[i] = xr[i] * inv * w[i];
    }
  });
  return absl::OkStatus();
}

absl::Status LayerNorm(const float* x, const float* w, const float* b, float* y, int rows, int d,
                       float eps) {
  if (rows < 0 || d <= 0) return absl::InvalidArgumentError(absl::StrFormat("LayerNorm: rows=%d d=%d", rows, d));
  DefaultPool().ParallelFor(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * d;
      float* yr = y + r * d;
      double mean = 0;
      for (int i = 0; i < d; ++i) mean += xr[i];
      mean /= d;
      double var = 0;
      for (int i = 0; i < d; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      var /= d;
      const double inv = 1.0 / std::sqrt(var + eps);
      for (int i = 0; i < d; ++i) {
        yr[i] = static_cast<float>((xr[i] - mean) * inv) * w[i] + b[i];
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace hap::cpu
