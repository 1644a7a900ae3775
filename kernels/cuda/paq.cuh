// The PAQ of one map by one block (kernels/cuda/paq.h says what it is and how it is summed): the
// body of PaqKernel, which HapScoring's fused scores-and-selection kernel also runs for a stage's
// map when that map is one layer's.
#pragma once

#include <cstdint>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/reduce.cuh"

namespace hap::cuda {

// The threads that take the map's columns (thread t: columns t, t + kPaqColumnThreads, …). A
// block has at least this many; the others take part in the row checks and the sums only, with
// nothing of their own, so a larger block gives the same bits.
constexpr int kPaqColumnThreads = 256;

// A load of what BlockPaq reads: kThroughL2 bypasses the L1 cache, for a map other blocks of the
// same launch wrote (the last block of a head in TextVisualAttentionPaq).
template <bool kThroughL2, typename T>
__device__ __forceinline__ T PaqLoad(const T* p) {
  if constexpr (kThroughL2) {
    return __ldcg(p);
  } else {
    return *p;
  }
}

// paq[0] = the PAQ of map a F32 [n_text, n_vis] (row_entropy null: the definition; else the
// map's F64 [n_text] row entropies, PaqFromRowEntropies), written by thread 0. Every thread
// calls it (it has barriers); blockDim.x a multiple of 32 and at least kPaqColumnThreads.
// scratch: 32 shared doubles, bad: 1 shared int.
template <bool kThroughL2 = false>
__device__ __forceinline__ void BlockPaq(const float* a, const double* row_entropy, int n_text,
                                         int n_vis, float* paq, double* scratch, int* bad) {
  constexpr double kRowSumTolerance = 1e-3;  // kernels::kPaqRowSumTolerance
  const double pt = 1.0 / n_text;
  if (threadIdx.x == 0) bad[0] = 0;
  bool my_bad = false;

  // Columns: p(v_i) down the rows in the reference's order, then its terms of H_v and I.
  double hv = 0.0, mi = 0.0;
  const int first = threadIdx.x < kPaqColumnThreads ? static_cast<int>(threadIdx.x) : n_vis;
  for (int i = first; i < n_vis; i += kPaqColumnThreads) {
    double pv = 0.0;
    for (int j = 0; j < n_text; ++j) {
      const float x = PaqLoad<kThroughL2>(a + static_cast<int64_t>(j) * n_vis + i);
      my_bad |= !(x >= 0.f && x < INFINITY);  // also NaN; −0 passes as in the reference
      pv += pt * x;
    }
    if (!(pv > 0.0)) continue;  // no term: every A(j,i) is 0
    const double ln_pv = log(pv);
    hv -= pv * ln_pv;
    if (row_entropy != nullptr) continue;
    for (int j = 0; j < n_text; ++j) {
      const float x = PaqLoad<kThroughL2>(a + static_cast<int64_t>(j) * n_vis + i);
      if (x > 0.f) mi += pt * x * (log(static_cast<double>(x)) - ln_pv);
    }
  }

  // Rows: one warp per row checks that it sums to 1.
  const int lane = threadIdx.x % 32;
  for (int j = threadIdx.x / 32; j < n_text; j += blockDim.x / 32) {
    const float* row = a + static_cast<int64_t>(j) * n_vis;
    double s = 0.0;
    for (int i = lane; i < n_vis; i += 32) s += PaqLoad<kThroughL2>(row + i);
    s = WarpSumF64(s);
    my_bad |= !(fabs(s - 1.0) <= kRowSumTolerance);
  }
  __syncthreads();  // bad[0] = 0 is done before any thread sets it
  if (my_bad) bad[0] = 1;
  // Its barriers also publish bad[0]. Past the first kPaqColumnThreads threads every value is
  // +0, so the sums are those of a block of that many.
  hv = BlockSumF64(hv, scratch);
  mi = BlockSumF64(mi, scratch);
  if (threadIdx.x != 0) return;

  bool ok = bad[0] == 0;
  if (row_entropy != nullptr) {
    double h_rows = 0.0;  // Σ_j H(row j), in the reference's order
    for (int j = 0; j < n_text; ++j) {
      const double h = PaqLoad<kThroughL2>(row_entropy + j);
      ok &= fabs(h) < INFINITY;
      h_rows += h;
    }
    mi = hv - h_rows / n_text;
  }
  if (!ok) {
    paq[0] = NAN;
  } else if (hv <= 1e-12) {
    paq[0] = 0.f;
  } else {
    paq[0] = static_cast<float>(fmin(fmax(mi / hv, 0.0), 1.0));
  }
}

}  // namespace hap::cuda
