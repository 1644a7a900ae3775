// Visual-token scores from an attention map: s_i = mean_j A(j,i) (docs/design.md §3 token score;
// also the head-mean / rater-mean scores of FastV, PDrop and SparseVLM when the rows are
// heads × queries).
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace hap::kernels {

//   map:    F32 [n_rows, n_vis]
//   scores: F32 [n_vis], scores[i] = (1/n_rows) Σ_j map[j, i]
// Accumulates in double. InvalidArgument on null pointers or non-positive sizes.
absl::Status TokenScores(const float* map, int64_t n_rows, int n_vis, float* scores);

// The same over a chosen subset of rows: scores[i] = mean over r in rows of map[r, i].
//   rows: [n_sel] indices into [0, n_rows)
absl::Status TokenScoresOfRows(const float* map, int64_t n_rows, int n_vis, const int* rows,
                               int n_sel, float* scores);

}  // namespace hap::kernels
