#include "kernels/cpu/activation.h"

#include <cmath>

#include "base/thread_pool.h"

namespace hap::cpu {
namespace {

template <typename F>
void Elementwise(int64_t n, F f) {
  if (n < (1 << 14)) {
    f(0, n);
    return;
  }
  DefaultPool().ParallelFor(n, f);
}

}  // namespace

void QuickGelu(float* x, int64_t n) {
  Elementwise(n, [x](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] = x[i] / (1.f + std::exp(-1.702f * x[i]));
  });
}

void Gelu(float* x, int64_t n) {
  Elementwise(n, [x](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * 0.70710678118654752f));
  });
}

void GeluTanh(float* x, int64_t n) {
  Elementwise(n, [x](int64_t b, int64_t e) {
    constexpr float kC = 0.79788456080286536f;  // √(2/π)
    for (int64_t i = b; i < e; ++i) {
      const float v = x[i];
      x[i] = 0.5f * v * (1.f + std::tanh(kC * (v + 0.044715f * v * v * v)));
    }
  });
}

void SiluMul(float* gate, const float* up, int64_t n) {
  Elementwise(n, [gate, up](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) gate[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
  });
}

void AddInPlace(float* y, const float* x, int64_t n) {
  Elementwise(n, [y, x](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] += x[i];
  });
}

}  // namespace hap::cpu
