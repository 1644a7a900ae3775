#include "kernels/cuda/device.cuh"
#include "kernels/cuda/paq.cuh"
#include "kernels/cuda/paq.h"

namespace hap::cuda {
namespace {

constexpr int kThreads = kPaqColumnThreads;

// One block per map (blockIdx.x). row_entropy null: the definition (Paq); else F64
// [n_maps, n_text] (PaqFromRowEntropies).
__global__ void PaqKernel(const float* maps, const double* row_entropy, int n_text, int n_vis,
                          float* paq) {
  HAP_SHARED(double, scratch, 32);
  HAP_SHARED(int, bad, 1);  // some entry or row of the map fails the reference's checks
  const int m = blockIdx.x;
  BlockPaq(maps + static_cast<int64_t>(m) * n_text * n_vis,
           row_entropy == nullptr ? nullptr : row_entropy + static_cast<int64_t>(m) * n_text,
           n_text, n_vis, paq + m, scratch, bad);
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
