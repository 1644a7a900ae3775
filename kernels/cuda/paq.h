// PAQ on the GPU (kernels/cpu/prune/paq.h, docs/design.md §3): the uncertainty coefficient
// I(V;T)/H(V) of each text→visual attention map, into a device array that the PAQ-softmax
// (kernels/cuda/paq_softmax.h) reads where it is.
#pragma once

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// kernels::PaqReference's definition and arithmetic, one block per map: each thread owns
// columns i and walks them down the rows, so p(v_i) = Σ_j p(t)·A(j,i) is summed in the
// reference's order (bit-identical), ln p(v_i) is taken once per column and
// I = Σ_ij p(t)·A(j,i)·(ln A(j,i) − ln p(v_i)); H_v and I are F64 block sums.
//   maps: F32 [n_maps, n_text, n_vis] (device)   paq: F32 [n_maps] (device)
// A map the reference rejects (a negative or non-finite entry, or a row whose F64 sum is off 1
// by more than kernels::kPaqRowSumTolerance = 1e-3) gets paq = NaN rather than an error: the
// check runs on the device, where nothing waits for it; the NaN goes on through the PAQ-softmax
// and the caller reports it when it copies the values out (HapPruner, at its stage's sync).
// Errors here are bad sizes and null pointers only.
// Work: 2 reads and one F64 logarithm per element, plus one read for the row sums.
KernelStatus Paq(const float* maps, int n_maps, int n_text, int n_vis, float* paq, Stream stream);

// kernels::PaqFromRowEntropies: I = H_v − (Σ_j H(row j)) / n_text with the row entropies of
// TextVisualAttention, so no logarithm per element. A non-finite entropy also gives NaN.
//   row_entropy: F64 [n_maps, n_text] (device)
KernelStatus PaqFromRowEntropies(const float* maps, const double* row_entropy, int n_maps,
                                 int n_text, int n_vis, float* paq, Stream stream);

}  // namespace hap::cuda
