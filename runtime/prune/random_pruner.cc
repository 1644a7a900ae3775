// RandomPruner and its portable subset sampler.
#include "runtime/prune/random_pruner.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <utility>

#include "base/status_macros.h"

namespace hap {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, bound), bound ≥ 1.
uint64_t Below(uint64_t bound, uint64_t* state) {
  const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % bound);  // multiple of bound
  for (;;) {
    const uint64_t x = SplitMix64(state);
    if (x < limit) return x % bound;
  }
}

}  // namespace

std::vector<int> RandomSubset(int n, int k, uint64_t* state) {
  std::vector<int> pool(n);
  std::iota(pool.begin(), pool.end(), 0);
  k = std::clamp(k, 0, n);
  for (int i = 0; i < k; ++i) {
    const int j = i + static_cast<int>(Below(static_cast<uint64_t>(n - i), state));
    std::swap(pool[i], pool[j]);
  }
  pool.resize(k);
  std::sort(pool.begin(), pool.end());
  return pool;
}

RandomPruner::RandomPruner(const Plan& plan, const ModelDims& dims, uint64_t seed)
    : PrunerBase("random", dims, plan.layer_visual_tokens), plan_(plan), seed_(seed) {}

PrunerBase::KeepResult RandomPruner::AfterLayer(const LayerAttention& att) {
  HAP_ASSIGN_OR_RETURN(bool has_image, StartLayer(att));
  if (att.layer == 0) state_ = seed_;  // every request with this seed draws the same subsets
  if (!has_image) return std::optional<std::vector<int>>();
  const int g = plan_.GroupOfLayer(att.layer);
  if (g < 0 || g >= plan_.M - 1 || att.layer != plan_.groups[g].last_layer()) {
    return std::optional<std::vector<int>>();
  }
  const auto start = std::chrono::steady_clock::now();
  const int keep = std::min(plan_.groups[g + 1].visual_tokens, att.n_vis);
  std::vector<int> kept = RandomSubset(att.n_vis, keep, &state_);
  return Commit(att, std::move(kept), Since(start));
}

}  // namespace hap
