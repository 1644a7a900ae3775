#include "kernels/cpu/linear.h"

#include <cblas.h>

#include <cstring>

#include "absl/strings/str_format.h"

namespace hap::cpu {

absl::Status Linear(const float* x, const float* w, const float* bias, float* y, int m, int k,
                    int n) {
  if (m < 0 || k <= 0 || n <= 0 || x == nullptr || w == nullptr || y == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("Linear: bad arguments m=%d k=%d n=%d", m, k, n));
  }
  if (m == 0) return absl::OkStatus();
  if (m == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.f, w, k, x, 1, 0.f, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.f, x, k, w, k, 0.f, y, n);
  }
  if (bias != nullptr) {
    for (int i = 0; i < m; ++i) {
      float* row = y + static_cast<int64_t>(i) * n;
      for (int j = 0; j < n; ++j) row[j] += bias[j];
    }
  }
  return absl::OkStatus();
}

void LinearReference(const float* x, const float* w, const float* bias, float* y, int m, int k,
                     int n) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double acc = bias ? bias[j] : 0.0;
      for (int t = 0; t < k; ++t) {
        acc += static_cast<double>(x[static_cast<int64_t>(i) * k + t]) * w[static_cast<int64_t>(j) * k + t];
      }
      y[static_cast<int64_t>(i) * n + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace hap::cpu
