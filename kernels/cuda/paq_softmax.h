// PAQ-softmax weights on the GPU (kernels/cpu/prune/paq_softmax.h): a layer's head weights and a
// group's layer weights are made where the PAQ values are, so neither comes back to the host.
#pragma once

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// weights[c] = exp(s_c − max s) / Σ exp(s − max s), s_c = (paq[c] − mean(paq)) / temperature
// (a kernel argument; 1 = the paper's PAQ-softmax, bit for bit the same arithmetic): the
// reference's arithmetic in its order — F64, sequential in c — so the weights equal kernels::
// PaqSoftmaxWeights' up to the last bit of the device's exp. n is a head or layer count (at
// most a few hundred scalars): one block, whose thread 0 makes the sums and the maximum in c
// order (which keeps the reference's order) while the exponentials are spread over the threads.
// A non-finite PAQ (a map that was not a distribution: kernels/cuda/paq.h) makes every weight
// NaN rather than an error: nothing here waits for the device, so the NaN travels through the
// weighted sums and token scores to the stage's sync, where the caller reports it.
//   paq: F32 [n] (device)   weights: F32 [n] (device), may not alias paq
// Errors: null pointers, n ≤ 0, a temperature that is not finite and > 0.
KernelStatus PaqSoftmaxWeights(const float* paq, int n, double temperature, float* weights,
                               Stream stream);

}  // namespace hap::cuda
