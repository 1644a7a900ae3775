#include "kernels/cpu/norm.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "base/thread_pool.h"

namespace hap::cpu {
namespace {

// Runs norm(xr, yr) on every row xr of x [rows, d] into the row yr of y, rows spread over the
// pool. `op` names the caller in the error for bad sizes.
template <typename NormRow>
absl::Status ForEachRow(const char* op, const float* x, float* y, int rows, int d, NormRow norm) {
  if (rows < 0 || d <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: rows=%d d=%d", op, rows, d));
  }
  DefaultPool().ParallelFor(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) norm(x + r * d, y + r * d);
  });
  return absl::OkStatus();
}

}  // namespace

absl::Status RmsNorm(const float* x, const float* w, float* y, int rows, int d, float eps) {
  return ForEachRow("RmsNorm", x, y, rows, d, [&](const float* xr, float* yr) {
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / d + eps));
    for (int i = 0; i < d; ++i) yr[i] = xr[i] * inv * w[i];
  });
}

absl::Status LayerNorm(const float* x, const float* w, const float* b, float* y, int rows, int d,
                       float eps) {
  return ForEachRow("LayerNorm", x, y, rows, d, [&](const float* xr, float* yr) {
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
  });
}

}  // namespace hap::cpu
