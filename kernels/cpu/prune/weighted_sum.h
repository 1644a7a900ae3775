// Weighted sum of attention maps: A = Σ_c w_c · A_c (the aggregation step of HAP's
// PAQ-softmax, over the heads of a layer or the layers of a group).
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace hap::kernels {

//   maps[c]: F32 [size] for c in [0, n_maps) (separate buffers, e.g. one per layer)
//   weights: F32 [n_maps]
//   out:     F32 [size]; may not alias any input map
// Accumulates each element in double. InvalidArgument on null pointers or non-positive sizes.
absl::Status WeightedSumMaps(const float* const* maps, const float* weights, int n_maps,
                             int64_t size, float* out);

// The same for maps stored back to back: maps F32 [n_maps, size].
absl::Status WeightedSumContiguous(const float* maps, const float* weights, int n_maps,
                                   int64_t size, float* out);

}  // namespace hap::kernels
