// StageSchedule helpers.
#include "runtime/prune/stage_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace hap {

std::vector<int> StageSchedule::LayerTokens(int n_layers, int v) const {
  std::vector<int> out(std::max(0, n_layers), v);
  for (size_t s = 0; s < after_layer.size(); ++s) {
    for (int l = after_layer[s] + 1; l < n_layers; ++l) out[l] = keep[s];
  }
  return out;
}

double StageSchedule::Average(int n_layers, int v) const {
  double sum = 0;
  for (int t : LayerTokens(n_layers, v)) sum += t;
  return n_layers > 0 ? sum / n_layers : 0;
}

absl::Status StageSchedule::Validate(int n_layers, int v) const {
  if (after_layer.size() != keep.size()) {
    return absl::InvalidArgumentError("schedule: layers and counts differ in length");
  }
  for (size_t s = 0; s < keep.size(); ++s) {
    const int prev_layer = s == 0 ? -1 : after_layer[s - 1];
    const int prev_keep = s == 0 ? v : keep[s - 1];
    if (after_layer[s] <= prev_layer || after_layer[s] > n_layers - 2 || keep[s] < 1 ||
        keep[s] > prev_keep) {
      return absl::InvalidArgumentError(absl::StrCat("schedule ", ToString(), " is not valid for ",
                                                     n_layers, " layers and ", v, " tokens"));
    }
  }
  return absl::OkStatus();
}

int StageSchedule::KeepAfter(int layer, int n_vis) const {
  const auto it = std::find(after_layer.begin(), after_layer.end(), layer);
  if (it == after_layer.end()) return 0;
  const int kept = std::min(keep[it - after_layer.begin()], n_vis);
  return kept >= n_vis ? 0 : kept;
}

std::string StageSchedule::ToString() const {
  std::string s;
  for (size_t i = 0; i < keep.size(); ++i) {
    absl::StrAppend(&s, i ? "; " : "", "after ", after_layer[i], " -> ", keep[i]);
  }
  return s.empty() ? "(no pruning)" : s;
}

absl::StatusOr<StageSchedule> OneStageSchedule(const std::string& method, int n_layers, int v,
                                               int k_full, double target) {
  const int L = n_layers;
  if (L < 2 || v < 1 || k_full < 1 || k_full > L - 1) {
    return absl::InvalidArgumentError(absl::StrCat(method, ": cannot prune after the first ",
                                                   k_full, " of ", L, " layers (V = ", v, ")"));
  }
  if (!std::isfinite(target) || target <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(method, ": bad target ", target));
  }
  StageSchedule s;
  if (target >= v) return s;
  const double minimum = (static_cast<double>(k_full) * v + (L - k_full)) / L;
  // The same relative slack as the planner's, so a target of exactly the minimum passes.
  if (target < minimum * (1.0 - 1e-9)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: a target of %g visual tokens per layer is below the minimum reachable average of "
        "%.2f (%.1f%% of %d): the first %d of %d layers see all %d tokens, the rest at least 1",
        method, target, minimum, 100.0 * minimum / v, v, k_full, L, v));
  }
  const double keep = (L * target - static_cast<double>(k_full) * v) / (L - k_full);
  const int k = std::clamp(static_cast<int>(std::lround(keep)), 1, v);
  if (k < v) {
    s.after_layer = {k_full - 1};
    s.keep = {k};
  }
  return s;
}

int ScaleLayer(int b, int n_layers, int lo, int hi) {
  const int l = static_cast<int>(std::lround(static_cast<double>(b) * n_layers / 32.0));
  return std::clamp(l, lo, hi);
}

}  // namespace hap
