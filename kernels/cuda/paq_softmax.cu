#include "kernels/cuda/paq_softmax.h"

#include "kernels/cuda/device.cuh"

namespace hap::cuda {
namespace {

// One thread.
__global__ void PaqSoftmaxKernel(const float* paq, int n, double temperature, float* weights) {
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
  // s_c = (PAQ_c − mean) / τ, as the reference (τ = 1 divides exactly).
  for (int c = 0; c < n; ++c) mx = fmax(mx, (paq[c] - mean) / temperature);
  double sum = 0.0;
  for (int c = 0; c < n; ++c) sum += exp((paq[c] - mean) / temperature - mx);
  for (int c = 0; c < n; ++c) {
    weights[c] = static_cast<float>(exp((paq[c] - mean) / temperature - mx) / sum);
  }
}

}  // namespace

KernelStatus PaqSoftmaxWeights(const float* paq, int n, double temperature, float* weights,
                               Stream stream) {
  if (paq == nullptr || weights == nullptr || n <= 0) {
    return KernelStatus::Error("PaqSoftmaxWeights: null pointer or n <= 0");
  }
  // !(τ > 0) catches NaN too; τ < inf.
  if (!(temperature > 0) || !(temperature < INFINITY)) {
    return KernelStatus::Error("PaqSoftmaxWeights: temperature is not a finite positive number");
  }
  return Launch("PaqSoftmaxKernel", PaqSoftmaxKernel, dim3(1), dim3(1), 0, stream, paq, n,
                temperature, weights);
}

}  // namespace hap::cuda
