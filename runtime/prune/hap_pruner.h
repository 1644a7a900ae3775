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
  // pruning step: on the CPU backend when the group's pruning step runs; on a device backend,
  // whose copy back would be a wait per step, all of them in Finish (their PAQs, weights and
  // scores stay in the backend's memory until then). Where the engine takes decisions in the
  // backend's memory (LayerAttention::backend_keep, a device backend's prefill), the kept
  // indices stay there too and a step waits for nothing: the plan fixes each step's count.
  // Otherwise a step on a device waits once, for its kept indices. Layers of the last group are
  // not scored (nothing is pruned after them), so M = 1 costs nothing.
  // paq_temperature τ (kPaqSoftmax only; > 0, finite) divides the centred PAQs at both the head
  // and the layer level: w_c = softmax((PAQ_c − mean PAQ) / τ). τ = 1 is the paper's definition
  // (docs/design.md §3), bit for bit; τ < 1 concentrates the weights. MakePruner checks requests
  // against [kMinPaqTemperature, kMaxPaqTemperature]; the uniform weighting takes only τ = 1.
  HapPruner(const Plan& plan, const ModelDims& dims, Weighting weighting,
            double paq_temperature = 1.0);

  KeepResult AfterLayer(const LayerAttention& att) override;
  absl::Status Finish(const std::vector<std::vector<int>>& backend_kept) override;

  const Plan& plan() const { return plan_; }

 private:
  // Where a group's scalars lie in scalars_ (F32 offsets), for G layers, H heads, n_vis tokens:
  // [G] PAQ_l, [G] w_l, [G, H] PAQ of each head, [G, H] head weights, [n_vis] token scores.
  struct ScalarLayout {
    int G, H, n_vis;
    size_t layer_paq() const { return 0; }
    size_t layer_weights() const { return static_cast<size_t>(G); }
    size_t head_paq(int slot) const { return 2 * static_cast<size_t>(G) + size_t(slot) * H; }
    size_t head_weights(int slot) const { return head_paq(G) + size_t(slot) * H; }
    size_t token_scores() const { return head_weights(G); }
    size_t size() const { return token_scores() + n_vis; }
  };
  // Fills the explain records of group g from its scalars, copied to the host (`host`, laid out
  // as `at` says) once its pruning step has synchronised. InvalidArgument naming the layer and
  // head when a PAQ is NaN: a device backend flags a map that is not a distribution that way.
  absl::Status RecordGroup(int g, const ScalarLayout& at, const std::vector<float>& host,
                           HapGroupExplain* gx);

  Plan plan_;
  Weighting weighting_;
  double paq_temperature_;
  // A_l of the current group's layers so far, each F32 [n_text, n_vis] in the backend's memory;
  // the buffers are kept across groups and requests so a layer allocates nothing.
  std::vector<BackendArray<float>> group_maps_;
  // In the backend's memory:
  BackendArray<float> head_maps_;      // F32 [H, n_text, n_vis]: Â_h of the current layer
  BackendArray<double> head_entropy_;  // F64 [H, n_text]: entropy of each row of Â_h
  BackendArray<float> group_map_;      // F32 [n_text, n_vis]: A_g at the end of a group
  // The scalars of every scored group, group g's at scalar_offsets_[g] (ScalarLayout), sized
  // from the plan at the request's first scored layer.
  BackendArray<float> scalars_;
  std::vector<size_t> scalar_offsets_;
  // The kept indices of every scored group decided in the backend's memory, group g's at
  // kept_offsets_[g]: I32 [Σ_g N_v(g+1)].
  BackendArray<int32_t> kept_;
  std::vector<size_t> kept_offsets_;
  // Pruning steps whose explain records wait for Finish (device backends).
  struct Pending {
    int group;
    ScalarLayout at;
    HapGroupExplain explain;  // kept and kept_original filled; the rest from the scalars
  };
  std::vector<Pending> pending_;
};

}  // namespace hap
