#include "kernels/cuda/device.cuh"
#include "kernels/cuda/paq_softmax.cuh"
#include "kernels/cuda/paq_softmax.h"

namespace hap::cuda {
namespace {

constexpr int kMaxThreads = 256;

// One block.
__global__ void PaqSoftmaxKernel(const float* paq, int n, double temperature, float* weights) {
  HAP_SHARED(double, e, kPaqSoftmaxStored);  // paq[c], then exp(s_c − max s)
  HAP_SHARED(double, at, 3);                 // mean (NaN: a PAQ is not finite), max s, Σ exp
  BlockPaqSoftmax(paq, n, temperature, e, at, weights);
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
  const int threads = n < kMaxThreads ? static_cast<int>(CeilDiv(n, 32)) * 32 : kMaxThreads;
  return Launch("PaqSoftmaxKernel", PaqSoftmaxKernel, dim3(1), dim3(threads), 0, stream, paq, n,
                temperature, weights);
}

}  // namespace hap::cuda
