// CPU reference of TokenScores.
#include "kernels/cpu/prune/token_scores.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace hap::kernels {

absl::Status TokenScores(const float* map, int64_t n_rows, int n_vis, float* scores) {
  if (map == nullptr || scores == nullptr || n_rows <= 0 || n_vis <= 0) {
    return absl::InvalidArgumentError("TokenScores: null pointer or non-positive size");
  }
  std::vector<double> acc(n_vis, 0.0);
  for (int64_t j = 0; j < n_rows; ++j) {
    const float* row = map + j * n_vis;
    for (int i = 0; i < n_vis; ++i) acc[i] += row[i];
  }
  for (int i = 0; i < n_vis; ++i) scores[i] = static_cast<float>(acc[i] / n_rows);
  return absl::OkStatus();
}

absl::Status TokenScoresOfRows(const float* map, int64_t n_rows, int n_vis, const int* rows,
                               int n_sel, float* scores) {
  if (map == nullptr || scores == nullptr || rows == nullptr || n_rows <= 0 || n_vis <= 0 ||
      n_sel <= 0) {
    return absl::InvalidArgumentError("TokenScoresOfRows: null pointer or non-positive size");
  }
  std::vector<double> acc(n_vis, 0.0);
  for (int r = 0; r < n_sel; ++r) {
    if (rows[r] < 0 || rows[r] >= n_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("TokenScoresOfRows: row ", rows[r], " outside [0, ", n_rows, ")"));
    }
    const float* row = map + int64_t{rows[r]} * n_vis;
    for (int i = 0; i < n_vis; ++i) acc[i] += row[i];
  }
  for (int i = 0; i < n_vis; ++i) scores[i] = static_cast<float>(acc[i] / n_sel);
  return absl::OkStatus();
}

}  // namespace hap::kernels
