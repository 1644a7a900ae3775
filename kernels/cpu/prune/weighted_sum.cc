// WeightedSumMaps: blocks of elements, each accumulated over the maps one map at a time into an
// F64 buffer that stays in L1. Every element sees the same additions in the same order as the
// element-at-a-time definition (0 + w_0·x_0 + w_1·x_1 + …; each product exact in F64), so the
// result is bit-identical to it, while the inner loop streams one map contiguously.
#include "kernels/cpu/prune/weighted_sum.h"

#include <algorithm>
#include <vector>

namespace hap::kernels {
namespace {

constexpr int64_t kBlock = 1024;  // elements per block: 8 KiB of F64 accumulators

// out[e] = Σ_c w_c·maps[c][e] for e in [begin, end), end − begin ≤ kBlock.
void SumBlock(const float* const* maps, const float* weights, int n_maps, int64_t begin,
              int64_t end, float* out) {
  double acc[kBlock];
  const int64_t n = end - begin;
  std::fill(acc, acc + n, 0.0);
  for (int c = 0; c < n_maps; ++c) {
    const double w = weights[c];
    const float* x = maps[c] + begin;
    for (int64_t e = 0; e < n; ++e) acc[e] += w * x[e];
  }
  for (int64_t e = 0; e < n; ++e) out[begin + e] = static_cast<float>(acc[e]);
}

}  // namespace

absl::Status WeightedSumMaps(const float* const* maps, const float* weights, int n_maps,
                             int64_t size, float* out) {
  if (maps == nullptr || weights == nullptr || out == nullptr || n_maps <= 0 || size <= 0) {
    return absl::InvalidArgumentError("WeightedSumMaps: null pointer or non-positive size");
  }
  for (int c = 0; c < n_maps; ++c) {
    if (maps[c] == nullptr) return absl::InvalidArgumentError("WeightedSumMaps: null map");
  }
  // One thread: a layer's sum is ~0.1 ms at the mid-size benchmark's shapes, less than handing
  // it to the pool costs on a loaded machine.
  for (int64_t begin = 0; begin < size; begin += kBlock) {
    SumBlock(maps, weights, n_maps, begin, std::min(size, begin + kBlock), out);
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
