// Visual-token scores on the GPU, s_i = mean_j A(j,i) (kernels/cpu/prune/token_scores.h,
// docs/design.md §3): over all rows of a map, or over chosen rows.
#pragma once

#include <cstdint>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// scores[i] = (1/n_rows) Σ_j map[j, i], in F64: each block takes 32 columns, its 8 warps take
// every 8th row each (coalesced 128-byte row segments), and the 8 partial sums are added in a
// fixed order: the result does not depend on thread timing, and it agrees with the reference's
// sequential F64 sum to F32 rounding (bit for bit in the parity cases).
//   map: F32 [n_rows, n_vis] (device)   scores: F32 [n_vis] (device)
KernelStatus TokenScores(const float* map, int64_t n_rows, int n_vis, float* scores, Stream stream);

// The same over chosen rows: scores[i] = mean over r < n_sel of map[rows[r], i].
//   rows: I32 [n_sel] (device), indices into [0, n_rows), repeats allowed
// The indices cannot be checked from the host here: the backend checks its host copy before it
// uploads them. An index outside [0, n_rows) is never read; it makes every score NaN.
KernelStatus TokenScoresOfRows(const float* map, int64_t n_rows, int n_vis, const int* rows,
                               int n_sel, float* scores, Stream stream);

}  // namespace hap::cuda
