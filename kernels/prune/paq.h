// PAQ (Prompt-grounded Attention Quality, SPEC §3): the uncertainty coefficient I(V;T)/H(V) of
// a text→visual attention map whose rows are distributions over the visual tokens.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace hap::kernels {

// PAQ of each of n_maps maps. With p(t_j) = 1/N_t, p(v_i,t_j) = A(j,i)/N_t, p(v_i) = Σ_j
// p(v_i,t_j):
//   I   = Σ_ij p(v_i,t_j) · ln(A(j,i) / p(v_i))      (terms with A(j,i) = 0 contribute 0)
//   H_v = −Σ_i p(v_i) ln p(v_i)
//   PAQ = I / H_v, and 0 when H_v ≤ 1e-12.
// Accumulates in double. Identical rows give 0; distinct one-hot rows give 1.
//   maps: F32 [n_maps, n_text, n_vis], rows non-negative and summing to 1 (±1e-3)
//   paq:  F32 [n_maps]
// InvalidArgument on bad sizes/pointers, a negative or non-finite entry, or a row whose sum is
// off by more than 1e-3 (PAQ is only a ratio in [0, 1] for row-stochastic maps). Results are
// clamped to [0, 1] to absorb rounding of the order of 1e-16.
absl::Status Paq(const float* maps, int n_maps, int n_text, int n_vis, float* paq);

// Tolerance on row sums accepted by Paq.
inline constexpr double kPaqRowSumTolerance = 1e-3;

}  // namespace hap::kernels
