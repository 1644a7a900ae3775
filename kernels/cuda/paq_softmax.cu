#include "kernels/cuda/paq_softmax.h"

#include "kernels/cuda/device.cuh"

namespace hap::cuda {
namespace {

// One thread.
__global__ void PaqSoftmaxKernel(const float* paq, int n, float* weights) {
  double mean = 0.0;
  bool finite = true;
  for (int c = 0; c < n; ++c) {
    finite &= fabs(static_cast<double>(paq[c])) < INFINITY;  // NaN fails too
    mean += paq[c];
  }
  if (!finite) {
    for (int c = 0; c < n; ++c) weights[c] = NAN;
    return;
  }
  mean /= n;
  double mx = -1e300;
  for (int c = 0; c < n; ++c) mx = fmax(mx, paq[c] - mean);
  double sum = 0.0;
  for (int c = 0; c < n; ++c) sum += exp((paq[c] - mean) - mx);
  for (int c = 0; c < n; ++c) weights[c] = static_cast<float>(exp((paq[c] - mean) - mx) / sum);
}

}  // namespace

KernelStatus PaqSoftmaxWeights(const float* paq, int n, float* weights, Stream stream) {
  if (paq == nullptr || weights == nullptr || n <= 0) {
    return KernelStatus::Error("PaqSoftmaxWeights: null pointer or n <= 0");
  }
  return Launch("PaqSoftmaxKernel", PaqSoftmaxKernel, dim3(1), dim3(1), 0, stream, paq, n,
                weights);
}

}  // namespace hap::cuda
