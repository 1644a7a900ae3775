// SparseVLM (v2 style, no recycling; docs/design.md §4): raters are the query-text tokens whose
// embedding-space relevance to the image is above the mean; at the output of layers 2, 6, 15
// (1-based) the visual tokens with the largest head-mean attention from the raters are kept.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "runtime/prune/model_dims.h"
#include "runtime/prune/pruner_base.h"
#include "runtime/prune/stage_schedule.h"

namespace hap {

class SparseVlmPruner : public PrunerBase {
 public:
  SparseVlmPruner(const ModelDims& dims, StageSchedule schedule);

  // Picks the raters from the input embeddings (prunes nothing there); required before layer 0.
  KeepResult Begin(const PrefillInput& input) override;
  bool ReadsInputEmbeddings() const override { return true; }
  KeepResult AfterLayer(const LayerAttention& att) override;

  const StageSchedule& schedule() const { return schedule_; }
  // Rater rows as offsets into the query text (row vis_begin + n_vis + r of the sequence).
  const std::vector<int>& raters() const { return raters_; }
  // score_t = mean over visual tokens v of softmax_t(v·t) (F32 [N_t]), from Begin.
  const std::vector<float>& text_relevance() const { return relevance_; }

 private:
  StageSchedule schedule_;
  std::vector<int> raters_;
  std::vector<float> relevance_;
  int n_text_ = -1;  // query-text length seen by Begin
};

// Pruning layers: the outputs of layers 2, 6, 15 counted from 1, i.e. at the end of 0-based
// layers 1, 5, 14 (for a 32-layer model; scaled by L/32 otherwise). This reading is the one
// under which the design's counts (docs/design.md §4) reach their targets: with V = 576, L = 32,
// 192 → [300, 200, 118] averages 192.4, 128 → [238, 108, 60] exactly 128, 64 → [66, 34, 20]
// 64.4.
//
// Counts for other targets, on the 576-token scale t = target·576/V (then scaled by V/576):
//  - 64 ≤ t ≤ 576: per-stage linear interpolation between the neighbouring anchors
//    64, 128, 192 (the design's schedules, docs/design.md §4) and 576 → [576, 576, 576]
//    (no pruning);
//  - t < 64: the 64 schedule scaled by f so the unrounded average equals t,
//    f = (L·t − len_0·576) / Σ_s len_s·c_s, floored at 1 token per stage.
// target ≥ V → no stage. The achieved average is the schedule's (StageSchedule::Average).
absl::StatusOr<StageSchedule> SparseVlmSchedule(const ModelDims& dims, double target);

}  // namespace hap
