#include "kernels/cuda/paq_softmax.h"

#include "kernels/cuda/device.cuh"

namespace hap::cuda {
namespace {

constexpr int kMaxThreads = 256;
constexpr int kStored = 1024;  // values kept in shared memory; beyond, recomputed from paq

// One block. The sums and the maximum run in c order on thread 0, as the reference's (F64 adds
// of a few hundred values cost nothing); the exponentials, the expensive part, are spread over
// the threads.
__global__ void PaqSoftmaxKernel(const float* paq, int n, double temperature, float* weights) {
  HAP_SHARED(double, e, kStored);  // paq[c], then exp(s_c − max s), for c < kStored
  HAP_SHARED(double, at, 3);       // mean (NaN: a PAQ is not finite), max s, Σ exp
  const int t = static_cast<int>(threadIdx.x);
  for (int c = t; c < n && c < kStored; c += blockDim.x) e[c] = paq[c];
  __syncthreads();
  if (t == 0) {
    double mean = 0.0;
    bool finite = true;
    for (int c = 0; c < n; ++c) {
      const double p = c < kStored ? e[c] : static_cast<double>(paq[c]);
      finite &= fabs(p) < INFINITY;  // NaN fails too
      mean += p;
    }
    mean /= n;
    // s_c = (PAQ_c − mean) / τ, as the reference (τ = 1 divides exactly).
    double mx = -1e300;
    for (int c = 0; c < n; ++c) {
      mx = fmax(mx, ((c < kStored ? e[c] : static_cast<double>(paq[c])) - mean) / temperature);
    }
    at[0] = finite ? mean : NAN;
    at[1] = mx;
  }
  __syncthreads();
  const double mean = at[0], mx = at[1];
  if (mean != mean) {  // uniform: every thread leaves here
    for (int c = t; c < n; c += blockDim.x) weights[c] = NAN;
    return;
  }
  for (int c = t; c < n && c < kStored; c += blockDim.x)
    e[c] = exp((e[c] - mean) / temperature - mx);
  __syncthreads();
  if (t == 0) {
    double sum = 0.0;
    for (int c = 0; c < n; ++c) {
      sum += c < kStored ? e[c] : exp((static_cast<double>(paq[c]) - mean) / temperature - mx);
    }
    at[2] = sum;
  }
  __syncthreads();
  const double sum = at[2];
  for (int c = t; c < n; c += blockDim.x) {
    const double x =
        c < kStored ? e[c] : exp((static_cast<double>(paq[c]) - mean) / temperature - mx);
    weights[c] = static_cast<float>(x / sum);
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
  const int threads = n < kMaxThreads ? static_cast<int>(CeilDiv(n, 32)) * 32 : kMaxThreads;
  return Launch("PaqSoftmaxKernel", PaqSoftmaxKernel, dim3(1), dim3(threads), 0, stream, paq, n,
                temperature, weights);
}

}  // namespace hap::cuda
