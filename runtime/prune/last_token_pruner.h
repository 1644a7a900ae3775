// FastV and PDrop (docs/design.md §4): at fixed layers, score each visual token by the head-mean
// attention of the last prompt token (no renormalisation) and keep the top tokens of the
// schedule.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "runtime/prune/model_dims.h"
#include "runtime/prune/pruner_base.h"
#include "runtime/prune/stage_schedule.h"

namespace hap {

class LastTokenPruner : public PrunerBase {
 public:
  // schedule must satisfy schedule.Validate(dims.n_layers, dims.n_visual_tokens).
  LastTokenPruner(std::string method, const ModelDims& dims, StageSchedule schedule);

  KeepResult AfterLayer(const LayerAttention& att) override;
  const StageSchedule& schedule() const { return schedule_; }

 private:
  StageSchedule schedule_;
};

// FastV with K = 2: prune once at the end of layer K − 1 = 1 to
// keep = round((L·target − K·V) / (L − K)), clamped to [1, V] (so targets below K·V/L reach
// only the 1-token floor; the achieved average is the schedule's). target ≥ V → no stage.
// InvalidArgument for L < 3 or a non-positive target.
absl::StatusOr<StageSchedule> FastvSchedule(const ModelDims& dims, double target);

// PDrop for a target average: boundaries [2, 8, 16] of a 32-layer model (scaled as
// round(b·L/32) otherwise), i.e. pruning at the end of layers 1, 7, 15, with stage s keeping
// max(1, round(V·λ^s)) tokens; λ in [0, 1] is bisected so that the unrounded average
// (V/L)·Σ_s len_s·λ^s equals the target. Targets below (V/L)·len_0 give λ = 0 (1 token per
// later stage). *lambda receives λ when non-null. target ≥ V → no stage.
absl::StatusOr<StageSchedule> PdropSchedule(const ModelDims& dims, double target,
                                            double* lambda = nullptr);

// PDrop with explicit stage boundaries (first layer of each reduced stage, ascending, in
// [1, L−1]) and ratio λ: stage s keeps max(1, round(V·λ^s)). The paper's default is
// boundaries {8, 16, 24}, λ = 0.5.
absl::StatusOr<StageSchedule> PdropScheduleFor(const ModelDims& dims,
                                               const std::vector<int>& boundaries, double lambda);

}  // namespace hap
