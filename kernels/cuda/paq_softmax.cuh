// The PAQ-softmax weights made by one block (kernels/cuda/paq_softmax.h says what they are): the
// body of PaqSoftmaxKernel, which HapScoring's fused layer-map kernel runs in each of its blocks.
#pragma once

#include "kernels/cuda/device.cuh"

namespace hap::cuda {

// PAQ values kept in shared memory by BlockPaqSoftmax; beyond, recomputed from paq.
constexpr int kPaqSoftmaxStored = 1024;

// weights[c] for c < n, written by the whole block (every thread calls it: it has barriers).
// The sums and the maximum run in c order on thread 0, as the reference's (F64 adds of a few
// hundred values cost nothing); the exponentials, the expensive part, are spread over the
// threads, so the result does not depend on the block's size. e: kPaqSoftmaxStored shared
// values, at: 3. A non-finite PAQ makes every weight NaN. The last write to weights is followed
// by no barrier: a caller that reads them back from other threads syncs first.
__device__ __forceinline__ void BlockPaqSoftmax(const float* paq, int n, double temperature,
                                                double* e, double* at, float* weights) {
  const int t = static_cast<int>(threadIdx.x);
  for (int c = t; c < n && c < kPaqSoftmaxStored; c += blockDim.x) e[c] = paq[c];
  __syncthreads();
  if (t == 0) {
    double mean = 0.0;
    bool finite = true;
    for (int c = 0; c < n; ++c) {
      const double p = c < kPaqSoftmaxStored ? e[c] : static_cast<double>(paq[c]);
      finite &= fabs(p) < INFINITY;  // NaN fails too
      mean += p;
    }
    mean /= n;
    // s_c = (PAQ_c − mean) / τ, as the reference (τ = 1 divides exactly).
    double mx = -1e300;
    for (int c = 0; c < n; ++c) {
      mx = fmax(
          mx, ((c < kPaqSoftmaxStored ? e[c] : static_cast<double>(paq[c])) - mean) / temperature);
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
  for (int c = t; c < n && c < kPaqSoftmaxStored; c += blockDim.x) {
    e[c] = exp((e[c] - mean) / temperature - mx);
  }
  __syncthreads();
  if (t == 0) {
    double sum = 0.0;
    for (int c = 0; c < n; ++c) {
      sum += c < kPaqSoftmaxStored ? e[c]
                                   : exp((static_cast<double>(paq[c]) - mean) / temperature - mx);
    }
    at[2] = sum;
  }
  __syncthreads();
  const double sum = at[2];
  for (int c = t; c < n; c += blockDim.x) {
    const double x =
        c < kPaqSoftmaxStored ? e[c] : exp((static_cast<double>(paq[c]) - mean) / temperature - mx);
    weights[c] = static_cast<float>(x / sum);
  }
}

}  // namespace hap::cuda
