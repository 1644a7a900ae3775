// The "random" baseline (docs/design.md §4): HAP's group schedule, but the tokens kept at the
// end of each group are a uniformly random subset (seeded, reproducible across platforms).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/prune/planner.h"
#include "runtime/prune/pruner_base.h"

namespace hap {

class RandomPruner : public PrunerBase {
 public:
  RandomPruner(const Plan& plan, const ModelDims& dims, uint64_t seed);
  KeepResult AfterLayer(const LayerAttention& att) override;

 private:
  Plan plan_;
  uint64_t seed_;
  uint64_t state_ = 0;
};

// k distinct indices drawn uniformly from [0, n), ascending: a partial Fisher–Yates shuffle
// driven by SplitMix64 with rejection sampling (no modulo bias, no implementation-defined
// std:: distributions), so a seed gives the same subset everywhere. *state advances.
std::vector<int> RandomSubset(int n, int k, uint64_t* state);

}  // namespace hap
