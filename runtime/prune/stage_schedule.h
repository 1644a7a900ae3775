// A fixed-layer pruning schedule (FastV, PDrop, SparseVLM): prune at the end of given layers
// down to given token counts.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

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
};

// A layer boundary given for a 32-layer model (LLaVA-1.5's decoder), scaled to n_layers:
// round(b · L / 32), clamped to [lo, hi].
int ScaleLayer(int layer_for_32, int n_layers, int lo, int hi);

}  // namespace hap
