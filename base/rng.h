// The project's one pseudo-random generator: xoshiro256** seeded through splitmix64, with
// Box-Muller normals, so values are identical on every platform and standard library (random
// checkpoints, tests and benchmarks draw from it).
#pragma once

#include <cstdint>

namespace hap {

class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  double Uniform();  // in [0, 1), 53 random bits
  double Normal();   // standard normal

 private:
  uint64_t s_[4];
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace hap
