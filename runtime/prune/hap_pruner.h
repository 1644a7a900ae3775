// HAP (docs/design.md §3): per layer, PAQ-softmax over the heads' renormalised text→visual maps;
// at the end of each group but the last, PAQ-softmax over the group's layer maps, token scores,
// and the top N_v(g+1) kept. Also the "uniform" ablation (head weights 1/H, layer weights
// 1/|group|), and both weightings over the plan's flat token schedule ("hap-flat",
// "uniform-flat": the paper's factorial ablation, TokenSchedule::kFlat in planner.h).
#pragma once

#include <vector>

#include "runtime/prune/planner.h"
#include "runtime/prune/pruner_base.h"

namespace hap {

class HapPruner : public PrunerBase {
 public:
  enum class Weighting { kPaqSoftmax, kUniform };

  // "hap", "uniform", "hap-flat" or "uniform-flat".
  static const char* MethodName(Weighting weighting, TokenSchedule schedule);

  // The plan must be for dims (same L and V); its schedule names the method (MethodName).
  // stats() gains one HapLayerExplain per layer of groups 0..M−2 and one HapGroupExplain per
  // pruning step; layers of the last group are not scored (nothing is pruned after them), so
  // M = 1 costs nothing.
  HapPruner(const Plan& plan, const ModelDims& dims, Weighting weighting);

  KeepResult AfterLayer(const LayerAttention& att) override;

  const Plan& plan() const { return plan_; }

 private:
  Plan plan_;
  Weighting weighting_;
  // Layers of the current group so far: the first group_paq_.size() entries of group_maps_ are
  // their maps A_l, each F32 [n_text, n_vis], and group_paq_ their PAQ_l. group_maps_ keeps its
  // buffers across groups and requests so a layer allocates nothing.
  std::vector<BackendArray<float>> group_maps_;  // F32 [n_text, n_vis]: A_l of the group's layers
  std::vector<float> group_paq_;
  // In the backend's memory:
  BackendArray<float> head_maps_;      // F32 [H, n_text, n_vis]: Â_h of the current layer
  BackendArray<double> head_entropy_;  // F64 [H, n_text]: entropy of each row of Â_h
  BackendArray<float> group_map_;      // F32 [n_text, n_vis]: A_g at the end of a group
  BackendArray<float> token_scores_;   // F32 [n_vis]: s_i = mean_j A_g(j,i)
};

}  // namespace hap
