// DART (Wen et al., 2025, "Stop Looking for Important Tokens in Multimodal Language Models:
// Duplication Matters More", arXiv 2502.11494): prune once, early in the decoder, by duplication
// rather than importance — keep a few pivot tokens and the tokens least duplicated by them.
//
// The method (paper §3 and its reference code, LLaVA-1.5 defaults), at the end of layer K − 1:
//   pivots     P_v = the 4 visual tokens with the largest ‖k_t‖₁ and P_t = the 4 query-text tokens
//              (after the image) with the largest ‖k_t‖₁, k_t = the token's key row of that
//              layer, all KV heads concatenated ("K-norm", the paper's default pivot rule);
//   duplication dup(p, t) = cos(h_p, h_t), h = the layer's output hidden states;
//   selection  the pivots p_1..p_|P| in turn each take their share of the budget: the
//              still-unselected visual tokens (pivots excluded) with the lowest dup(p_i, ·);
//              kept = P_v ∪ the selected tokens, in original order. P_t only steer the selection
//              (they are text, not kept visual tokens). Each pivot ranks the candidates by its own
//              similarity (not by the maximum similarity to any pivot).
// Where the paper or its code is silent or arbitrary, this implementation chooses:
//   - K: 2 for a 32-layer decoder (the paper's LLaVA-1.5 setting: layers 0 and 1 see all V,
//     pruning at the end of layer 1, like FastV), scaled as ScaleLayer(2, L, 1, L − 1)
//     otherwise (K = 1 for 4 or 8 layers).
//   - Budget: the average visual tokens per layer (docs/design.md §4), so the count kept after
//     layer K − 1 is OneStageSchedule's keep = round((L·target − K·V) / (L − K)); a target below
//     (K·V + L − K) / L is InvalidArgument naming that minimum (36.9 of 576 for LLaVA-1.5-7B).
//     The paper's settings count the tokens kept after layer K instead (its "128 tokens" is a
//     77.8% reduction of the 576 there); as an average per layer, its lowest, 32, is out of
//     reach.
//   - Shares: with r = keep − |P_v| tokens to select and |P| pivots, pivot i takes
//     ⌊r/|P|⌋ + (i < r mod |P| ? 1 : 0) (the code takes ⌊budget/|P|⌋ each and so keeps
//     |P_v| + |P|·⌊budget/|P|⌋ tokens, not exactly the budget). Pivot order: P_v by descending
//     K-norm, then P_t likewise (the code iterates a Python set).
//   - |P_v| = min(4, keep) (keep ≤ 4: the top-keep tokens by K-norm, no selection);
//     |P_t| = min(4, N_t) (no query text: visual pivots only).
//   - Ties (equal norms, equal similarities): the lower index first. A zero vector has cosine 0
//     with everything.
//   - Features. The engine passes the layer's keys after RoPE and its output hidden states
//     (LayerAttention::hidden). The code ranks pivots by the L1 norm of the keys it takes from
//     the attention (after RoPE in the LLaMA implementation it patches) and measures
//     duplication on the hidden states after the model's final RMSNorm; the norm's per-row
//     scale does not change a cosine, its per-channel weight does, and the pruner does not have
//     it: duplication here is the cosine of the raw hidden states.
// Host path: the visual and query-text rows of the keys and hidden states are copied to the
// host (CopyToHost; (n_vis + N_t)·(kv_dim + d_model) floats once per request) and the norms,
// cosines and selection run there in F64 — a few |P|·n_vis·d_model multiply-adds, no Backend op
// computes them.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "runtime/prune/model_dims.h"
#include "runtime/prune/pruner_base.h"
#include "runtime/prune/stage_schedule.h"

namespace hap {

class DartPruner : public PrunerBase {
 public:
  static constexpr int kVisualPivots = 4;
  static constexpr int kTextPivots = 4;

  // schedule: at most one stage (DartSchedule), valid for dims.
  DartPruner(const ModelDims& dims, StageSchedule schedule);

  KeepResult AfterLayer(const LayerAttention& att) override;
  const StageSchedule& schedule() const { return schedule_; }

  // The pivots of the last pruning step, in selection order: visual pivots as indices into the
  // visual tokens present at that layer, text pivots as indices into its query-text rows.
  const std::vector<int>& visual_pivots() const { return visual_pivots_; }
  const std::vector<int>& text_pivots() const { return text_pivots_; }

 private:
  StageSchedule schedule_;
  std::vector<int> visual_pivots_, text_pivots_;
};

// The layer after which DART prunes, as a count of unpruned layers: ScaleLayer(2, L, 1, L − 1).
int DartFullLayers(int n_layers);

// DART's schedule for a target average: OneStageSchedule("dart", L, V, DartFullLayers(L),
// target) (its InvalidArgument below the reachable minimum included).
absl::StatusOr<StageSchedule> DartSchedule(const ModelDims& dims, double target);

}  // namespace hap
