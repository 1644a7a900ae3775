#include "kernels/cuda/paq.h"

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/reduce.cuh"

namespace hap::cuda {
namespace {

constexpr int kThreads = 256;
constexpr double kRowSumTolerance = 1e-3;  // kernels::kPaqRowSumTolerance

// One block per map (blockIdx.x); blockDim.x a multiple of 32. row_entropy null: the
// definition (Paq); else F64 [n_maps, n_text] (PaqFromRowEntropies).
__global__ void PaqKernel(const float* maps, const double* row_entropy, int n_text, int n_vis,
                          float* paq) {
  HAP_SHARED(double, scratch, 32);
  HAP_SHARED(int, bad, 1);  // some entry or row of the map fails the reference's checks
  const int m = blockIdx.x;
  const float* a = maps + static_cast<int64_t>(m) * n_text * n_vis;  // F32 [n_text, n_vis]
  const double pt = 1.0 / n_text;
  if (threadIdx.x == 0) bad[0] = 0;
  bool my_bad = false;

  // Columns: p(v_i) down the rows in the reference's order, then its terms of H_v and I.
  double hv = 0.0, mi = 0.0;
  for (int i = threadIdx.x; i < n_vis; i += blockDim.x) {
    double pv = 0.0;
    for (int j = 0; j < n_text; ++j) {
      const float x = a[static_cast<int64_t>(j) * n_vis + i];
      my_bad |= !(x >= 0.f && x < INFINITY);  // also NaN; −0 passes as in the reference
      pv += pt * x;
    }
    if (!(pv > 0.0)) continue;  // no term: every A(j,i) is 0
    const double ln_pv = log(pv);
    hv -= pv * ln_pv;
    if (row_entropy != nullptr) continue;
    for (int j = 0; j < n_text; ++j) {
      const float x = a[static_cast<int64_t>(j) * n_vis + i];
      if (x > 0.f) mi += pt * x * (log(static_cast<double>(x)) - ln_pv);
    }
  }

  // Rows: one warp per row checks that it sums to 1.
  const int lane = threadIdx.x % 32;
  for (int j = threadIdx.x / 32; j < n_text; j += blockDim.x / 32) {
    const float* row = a + static_cast<int64_t>(j) * n_vis;
    double s = 0.0;
    for (int i = lane; i < n_vis; i += 32) s += row[i];
    s = WarpSumF64(s);
    my_bad |= !(fabs(s - 1.0) <= kRowSumTolerance);
  }
  __syncthreads();  // bad[0] = 0 is done before any thread sets it
  if (my_bad) bad[0] = 1;
  hv = BlockSumF64(hv, scratch);  // its barriers also publish bad[0]
  mi = BlockSumF64(mi, scratch);
  if (threadIdx.x != 0) return;

  bool ok = bad[0] == 0;
  if (row_entropy != nullptr) {
    double h_rows = 0.0;  // Σ_j H(row j), in the reference's order
    for (int j = 0; j < n_text; ++j) {
      const double h = row_entropy[static_cast<int64_t>(m) * n_text + j];
      ok &= fabs(h) < INFINITY;
      h_rows += h;
    }
    mi = hv - h_rows / n_text;
  }
  if (!ok) {
    paq[m] = NAN;
  } else if (hv <= 1e-12) {
    paq[m] = 0.f;
  } else {
    paq[m] = static_cast<float>(fmin(fmax(mi / hv, 0.0), 1.0));
  }
}

KernelStatus LaunchPaq(const char* op, const float* maps, const double* row_entropy, int n_maps,
                       int n_text, int n_vis, float* paq, Stream stream) {
  if (maps == nullptr || paq == nullptr || n_maps <= 0 || n_text <= 0 || n_vis <= 0) {
    return KernelStatus::Error(std::string(op) + ": null pointer or non-positive size");
  }
  return Launch("PaqKernel", PaqKernel, dim3(n_maps), dim3(kThreads), 0, stream, maps, row_entropy,
                n_text, n_vis, paq);
}

}  // namespace

KernelStatus Paq(const float* maps, int n_maps, int n_text, int n_vis, float* paq, Stream stream) {
  return LaunchPaq("Paq", maps, nullptr, n_maps, n_text, n_vis, paq, stream);
}

KernelStatus PaqFromRowEntropies(const float* maps, const double* row_entropy, int n_maps,
                                 int n_text, int n_vis, float* paq, Stream stream) {
  if (row_entropy == nullptr) return KernelStatus::Error("PaqFromRowEntropies: null entropies");
  return LaunchPaq("PaqFromRowEntropies", maps, row_entropy, n_maps, n_text, n_vis, paq, stream);
}

}  // namespace hap::cuda
