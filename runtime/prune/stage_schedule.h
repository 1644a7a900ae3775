// A fixed-layer pruning schedule (FastV, PDrop, SparseVLM, DART): prune at the end of given
// layers down to given token counts.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hap {

struct StageSchedule {
  std::vector<int> after_layer;  // strictly ascending, in [0, L − 2]
  std::vector<int> keep;         // visual tokens from after_layer[s] + 1 on, non-increasing

  // [L] visual tokens each layer processes, starting from V.
  std::vector<int> LayerTokens(int n_layers, int n_visual_tokens) const;
  // Σ_l LayerTokens / L.
  double Average(int n_layers, int n_visual_tokens) const;
  // InvalidArgument unless the layers/counts are as documented and within [1, V].
  absl::Status Validate(int n_layers, int n_visual_tokens) const;
  std::string ToString() const;  // "after 1 → 64; after 7 → 32"
  // The tokens to keep at the end of `layer` from `n_vis` present: the stage's count (at most
  // n_vis), or 0 where no stage ends there or it would keep them all.
  int KeepAfter(int layer, int n_vis) const;
};

// One stage for a target average (the convention of docs/design.md §4): layers [0, k_full) see
// all V tokens, layers [k_full, L) keep = round((L·target − k_full·V) / (L − k_full)), i.e. prune
// once at the end of layer k_full − 1, so Σ_l N_v(l) / L = target up to rounding keep (off by at
// most (L − k_full) / (2L) tokens). target ≥ V, or keep rounding to V → no stage.
// InvalidArgument naming `method` for k_full outside [1, L − 1], a non-finite or non-positive
// target, or a target below the minimum reachable average (k_full·V + (L − k_full)) / L
// (keep = 1), which the message names. (FastvSchedule clamps at keep = 1 instead.)
absl::StatusOr<StageSchedule> OneStageSchedule(const std::string& method, int n_layers,
                                               int n_visual_tokens, int k_full, double target);

// A layer boundary given for a 32-layer model (LLaVA-1.5's decoder), scaled to n_layers:
// round(b · L / 32), clamped to [lo, hi].
int ScaleLayer(int layer_for_32, int n_layers, int lo, int hi);

}  // namespace hap
