// CPU references of the sampling ops: std::max_element, and a partial sort with the sampler's
// comparator.
#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/strings/str_format.h"

namespace hap::cpu {

absl::Status ArgMaxRows(const float* logits, int rows, int n, int32_t* ids) {
  if (logits == nullptr || ids == nullptr || rows < 0 || n <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ArgMaxRows: null pointer or bad shape (rows %d, n %d)", rows, n));
  }
  for (int r = 0; r < rows; ++r) {
    const float* row = logits + static_cast<int64_t>(r) * n;
    ids[r] = static_cast<int32_t>(std::max_element(row, row + n) - row);
  }
  return absl::OkStatus();
}

absl::Status TopLogits(const TopLogitsArgs& a) {
  if (a.logits == nullptr || a.values == nullptr || a.ids == nullptr || a.rows < 0 || a.n <= 0 ||
      a.k < 1 || a.k > std::min(a.n, kMaxTopLogits) ||
      (a.temperature != nullptr && a.row_sum == nullptr)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "TopLogits: null pointer or bad shape (rows %d, n %d, k %d of at most %d)", a.rows, a.n,
        a.k, kMaxTopLogits));
  }
  std::vector<int> order(a.n);
  for (int r = 0; r < a.rows; ++r) {
    const float* x = a.logits + static_cast<int64_t>(r) * a.n;
    float* values = a.values + static_cast<int64_t>(r) * a.k;
    int32_t* ids = a.ids + static_cast<int64_t>(r) * a.k;
    const float temperature = a.temperature != nullptr ? a.temperature[r] : 0.f;
    if (std::any_of(x, x + a.n, [](float v) { return std::isnan(v); })) {
      std::fill(values, values + a.k, std::numeric_limits<float>::quiet_NaN());
      std::fill(ids, ids + a.k, -1);
      if (a.temperature != nullptr) a.row_sum[r] = std::numeric_limits<double>::quiet_NaN();
      continue;
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + a.k, order.end(), [x](int i, int j) {
      return x[i] > x[j] || (x[i] == x[j] && i < j);
    });
    for (int c = 0; c < a.k; ++c) {
      values[c] = x[order[c]];
      ids[c] = order[c];
    }
    if (a.temperature == nullptr) continue;
    double sum = 0.0;
    if (temperature > 0.f) {
      const double mx = values[0];
      for (int i = 0; i < a.n; ++i) sum += std::exp((x[i] - mx) / temperature);
    }
    a.row_sum[r] = sum;
  }
  return absl::OkStatus();
}

}  // namespace hap::cpu
