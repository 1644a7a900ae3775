// LastTokenPruner and the FastV / PDrop schedules.
#include "runtime/prune/last_token_pruner.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace hap {

LastTokenPruner::LastTokenPruner(std::string method, const ModelDims& dims, StageSchedule schedule)
    : PrunerBase(std::move(method), dims,
                 schedule.LayerTokens(dims.n_layers, dims.n_visual_tokens)),
      schedule_(std::move(schedule)) {}

PrunerBase::KeepResult LastTokenPruner::AfterLayer(const LayerAttention& att) {
  HAP_ASSIGN_OR_RETURN(bool has_image, StartLayer(att));
  if (!has_image) return std::optional<std::vector<int>>();
  const int keep = schedule_.KeepAfter(att.layer, att.n_vis);
  if (keep == 0) return std::optional<std::vector<int>>();

  const auto start = std::chrono::steady_clock::now();
  if (NumText(att) <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(stats_.method, ": layer ", att.layer, ": the last prompt token is not text"));
  }
  // α of the last prompt token for every head: F32 [H, 1, n_vis], not renormalised.
  BackendArray<float> rows(*att.backend);
  HAP_RETURN_IF_ERROR(RowsAttention(att, att.n_tokens - 1, 1, /*renormalize=*/false, &rows));
  BackendArray<float> scores(*att.backend);  // head mean, F32 [n_vis]
  HAP_RETURN_IF_ERROR(scores.Resize(att.n_vis));
  HAP_RETURN_IF_ERROR(
      att.backend->pruning().TokenScores(rows.data(), att.n_heads, att.n_vis, scores.data()));
  std::vector<int> kept(keep);
  HAP_RETURN_IF_ERROR(
      att.backend->pruning().StableTopK(scores.data(), att.n_vis, keep, kept.data()));
  return Commit(att, std::move(kept), Since(start));
}

absl::StatusOr<StageSchedule> FastvSchedule(const ModelDims& dims, double target) {
  HAP_RETURN_IF_ERROR(dims.Validate());
  constexpr int kK = 2;
  const int L = dims.n_layers, V = dims.n_visual_tokens;
  if (L <= kK) return absl::InvalidArgumentError(absl::StrCat("fastv needs > ", kK, " layers"));
  if (!std::isfinite(target) || target <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("fastv: bad target ", target));
  }
  StageSchedule s;
  if (target >= V) return s;
  const double keep = std::round((L * target - kK * static_cast<double>(V)) / (L - kK));
  const int k = static_cast<int>(std::clamp(keep, 1.0, static_cast<double>(V)));
  if (k < V) {
    s.after_layer = {kK - 1};
    s.keep = {k};
  }
  return s;
}

absl::StatusOr<StageSchedule> PdropScheduleFor(const ModelDims& dims,
                                               const std::vector<int>& boundaries, double lambda) {
  HAP_RETURN_IF_ERROR(dims.Validate());
  if (!(lambda >= 0.0 && lambda <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("pdrop: lambda ", lambda, " outside [0, 1]"));
  }
  StageSchedule s;
  double ratio = 1.0;
  for (size_t i = 0; i < boundaries.size(); ++i) {
    ratio *= lambda;
    s.after_layer.push_back(boundaries[i] - 1);
    int k = std::max(1, static_cast<int>(std::lround(dims.n_visual_tokens * ratio)));
    if (!s.keep.empty()) k = std::min(k, s.keep.back());
    s.keep.push_back(k);
  }
  HAP_RETURN_IF_ERROR(s.Validate(dims.n_layers, dims.n_visual_tokens));
  return s;
}

absl::StatusOr<StageSchedule> PdropSchedule(const ModelDims& dims, double target, double* lambda) {
  HAP_RETURN_IF_ERROR(dims.Validate());
  const int L = dims.n_layers, V = dims.n_visual_tokens;
  if (L < 4) return absl::InvalidArgumentError("pdrop needs at least 4 layers");
  if (!std::isfinite(target) || target <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("pdrop: bad target ", target));
  }
  if (target >= V) {
    if (lambda) *lambda = 1.0;
    return StageSchedule{};
  }
  // Stage starts [2, 8, 16] for 32 layers; kept strictly ascending inside [1, L − 1].
  std::vector<int> b = {ScaleLayer(2, L, 1, L - 3), ScaleLayer(8, L, 1, L - 2),
                        ScaleLayer(16, L, 1, L - 1)};
  b[1] = std::max(b[1], b[0] + 1);
  b[2] = std::max(b[2], b[1] + 1);
  const double len[4] = {double(b[0]), double(b[1] - b[0]), double(b[2] - b[1]), double(L - b[2])};
  auto average = [&](double lam) {
    return V / static_cast<double>(L) *
           (len[0] + len[1] * lam + len[2] * lam * lam + len[3] * lam * lam * lam);
  };
  // average() is increasing on [0, 1] from V·len_0/L to V.
  double lo = 0.0, hi = 1.0;
  if (average(0.0) >= target) {
    hi = 0.0;
  } else {
    for (int it = 0; it < 100; ++it) {
      const double mid = 0.5 * (lo + hi);
      (average(mid) < target ? lo : hi) = mid;
    }
  }
  if (lambda) *lambda = hi;
  return PdropScheduleFor(dims, b, hi);
}

}  // namespace hap
