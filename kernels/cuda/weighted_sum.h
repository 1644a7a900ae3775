// Weighted sum of attention maps on the GPU, A = Σ_c w_c · A_c (kernels/cpu/prune/weighted_sum.h):
// the aggregation step of HAP's PAQ-softmax over the heads of a layer or the layers of a group.
#pragma once

#include <cstdint>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// out[e] = Σ_c weights[c]·maps[c][e], accumulated in F64 in map order from 0: each product of
// two floats is exact in F64, so the result is bit-identical to kernels::WeightedSumMaps. One
// element per thread; the weights and the map list are a few hundred bytes every thread reads
// (cached broadcasts).
//   maps:    device array of n_maps device pointers, each F32 [size]
//   weights: F32 [n_maps] (device: the PAQ-softmax weights, kernels/cuda/paq_softmax.h)
//   out:     F32 [size] (device), may not alias a map
// Errors: null pointers, non-positive sizes (a null pointer inside the device array cannot be
// seen from here: the backend checks its host copy).
KernelStatus WeightedSumMaps(const float* const* maps, const float* weights, int n_maps,
                             int64_t size, float* out, Stream stream);

// The same for maps stored back to back: maps F32 [n_maps, size] (device).
KernelStatus WeightedSumContiguous(const float* maps, const float* weights, int n_maps,
                                   int64_t size, float* out, Stream stream);

}  // namespace hap::cuda
