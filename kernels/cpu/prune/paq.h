// PAQ (Prompt-grounded Attention Quality, docs/design.md §3): the uncertainty coefficient
// I(V;T)/H(V) of a text→visual attention map whose rows are distributions over the visual
// tokens.
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
//
// Computes I as p(t)·Σ_ij A(j,i)·(ln A(j,i) − ln p(v_i)) with a vectorised logarithm, which
// agrees with PaqReference to ~1e-15 relative in I (H_v and the H_v ≤ 1e-12 test are identical).
absl::Status Paq(const float* maps, int n_maps, int n_text, int n_vis, float* paq);

// The same for maps whose row entropies H(row j) = −Σ_i A(j,i) ln A(j,i) are already known
// (TextVisualAttention's row_entropy, taken from the logits): I = H_v − p(t)·Σ_j H(row j), so no
// logarithm is taken per element. The maps are checked as by Paq; the result matches Paq to the
// accuracy of the given entropies (~1e-7 absolute from TextVisualAttention).
//   row_entropy: F64 [n_maps, n_text]
absl::Status PaqFromRowEntropies(const float* maps, const double* row_entropy, int n_maps,
                                 int n_text, int n_vis, float* paq);

// The definition as written above, one std::log(A/p(v)) per element: the CPU reference of Paq.
// Same contract and errors.
absl::Status PaqReference(const float* maps, int n_maps, int n_text, int n_vis, float* paq);

// Tolerance on row sums accepted by Paq.
inline constexpr double kPaqRowSumTolerance = 1e-3;

}  // namespace hap::kernels
