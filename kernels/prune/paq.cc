// CPU reference of Paq: two passes per map (marginal p(v), then I and H_v).
#include "kernels/prune/paq.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace hap::kernels {

absl::Status Paq(const float* maps, int n_maps, int n_text, int n_vis, float* paq) {
  if (maps == nullptr || paq == nullptr) return absl::InvalidArgumentError("Paq: null pointer");
  if (n_maps <= 0 || n_text <= 0 || n_vis <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Paq: sizes must be positive (n_maps=", n_maps,
                                                   " n_text=", n_text, " n_vis=", n_vis, ")"));
  }
  std::vector<double> pv(n_vis);  // p(v_i)
  const double pt = 1.0 / n_text;
  for (int m = 0; m < n_maps; ++m) {
    const float* a = maps + int64_t{m} * n_text * n_vis;  // F32 [n_text, n_vis]
    std::fill(pv.begin(), pv.end(), 0.0);
    for (int j = 0; j < n_text; ++j) {
      const float* row = a + int64_t{j} * n_vis;
      double row_sum = 0.0;
      for (int i = 0; i < n_vis; ++i) {
        if (!(row[i] >= 0.f) || !std::isfinite(row[i])) {
          return absl::InvalidArgumentError(
              absl::StrCat("Paq: map ", m, " row ", j, " column ", i, " is ", row[i]));
        }
        row_sum += row[i];
        pv[i] += pt * row[i];
      }
      if (std::abs(row_sum - 1.0) > kPaqRowSumTolerance) {
        return absl::InvalidArgumentError(
            absl::StrCat("Paq: map ", m, " row ", j, " sums to ", row_sum, ", not 1"));
      }
    }
    double hv = 0.0;
    for (int i = 0; i < n_vis; ++i) {
      if (pv[i] > 0.0) hv -= pv[i] * std::log(pv[i]);
    }
    if (hv <= 1e-12) {
      paq[m] = 0.f;
      continue;
    }
    double mi = 0.0;
    for (int j = 0; j < n_text; ++j) {
      const float* row = a + int64_t{j} * n_vis;
      for (int i = 0; i < n_vis; ++i) {
        // row[i] > 0 implies pv[i] ≥ row[i]/n_text > 0.
        if (row[i] > 0.f) mi += pt * row[i] * std::log(row[i] / pv[i]);
      }
    }
    paq[m] = static_cast<float>(std::clamp(mi / hv, 0.0, 1.0));
  }
  return absl::OkStatus();
}

}  // namespace hap::kernels
