// What the backend tests share: every backend they run on (the CPU one and the CUDA one on the
// SIMT emulation) and their deterministic random inputs.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace hap::testing_support {

inline std::vector<const Backend*> AllBackends() { return {&CpuBackend(), *GetCudaBackend()}; }

// n values uniform in [-scale, scale).
inline std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace hap::testing_support
