// CPU reference of WeightedSumMaps.
#include "kernels/prune/weighted_sum.h"

#include <vector>

namespace hap::kernels {

absl::Status WeightedSumMaps(const float* const* maps, const float* weights, int n_maps,
                             int64_t size, float* out) {
  if (maps == nullptr || weights == nullptr || out == nullptr || n_maps <= 0 || size <= 0) {
    return absl::InvalidArgumentError("WeightedSumMaps: null pointer or non-positive size");
  }
  for (int c = 0; c < n_maps; ++c) {
    if (maps[c] == nullptr) return absl::InvalidArgumentError("WeightedSumMaps: null map");
  }
  for (int64_t e = 0; e < size; ++e) {
    double acc = 0.0;
    for (int c = 0; c < n_maps; ++c) acc += double{weights[c]} * maps[c][e];
    out[e] = static_cast<float>(acc);
  }
  return absl::OkStatus();
}

absl::Status WeightedSumContiguous(const float* maps, const float* weights, int n_maps,
                                   int64_t size, float* out) {
  if (maps == nullptr || n_maps <= 0 || size <= 0) {
    return absl::InvalidArgumentError("WeightedSumContiguous: null pointer or non-positive size");
  }
  std::vector<const float*> ptrs(n_maps);
  for (int c = 0; c < n_maps; ++c) ptrs[c] = maps + c * size;
  return WeightedSumMaps(ptrs.data(), weights, n_maps, size, out);
}

}  // namespace hap::kernels
