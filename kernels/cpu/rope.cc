#include "kernels/cpu/rope.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/thread_pool.h"

namespace hap::cpu {

absl::Status Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
                  float theta) {
  if (head_dim <= 0 || head_dim % 2 != 0 || rows < 0 || n_heads <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Rope: rows=%d heads=%d head_dim=%d (head_dim must be even)", rows,
                        n_heads, head_dim));
  }
  const int half = head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    inv_freq[i] = 1.0 / std::pow(static_cast<double>(theta), (2.0 * i) / head_dim);
  }
  DefaultPool().ParallelFor(rows, [&](int64_t begin, int64_t end) {
    std::vector<float> cs(half), sn(half);
    for (int64_t r = begin; r < end; ++r) {
      for (int i = 0; i < half; ++i) {
        const double angle = static_cast<double>(positions[r]) * inv_freq[i];
        cs[i] = static_cast<float>(std::cos(angle));
        sn[i] = static_cast<float>(std::sin(angle));
      }
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + (r * n_heads + h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * cs[i] - b * sn[i];
          v[i + half] = b * cs[i] + a * sn[i];
        }
      }
    }
  });
  return absl::OkStatus();
}

absl::Status RopeAxes(const RopeAxesArgs& a) {
  if (const char* error = a.Error(); *error != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s (rows=%d heads=%d head_dim=%d sections=%d/%d/%d)", error, a.rows,
                        a.n_heads, a.head_dim, a.sections[0], a.sections[1], a.sections[2]));
  }
  const int half = a.head_dim / 2;
  // Per pair: its axis and frequency.
  std::vector<int> axis(half);
  std::vector<double> inv_freq(half);
  for (int i = 0, ax = 0, j = 0; i < half; ++i, ++j) {
    while (j >= a.sections[ax]) {
      j = 0;
      ++ax;
    }
    axis[i] = ax;
    const double exponent = a.per_section_frequencies ? static_cast<double>(j) / a.sections[ax]
                                                      : (2.0 * i) / a.head_dim;
    inv_freq[i] = 1.0 / std::pow(static_cast<double>(a.theta), exponent);
  }
  const int axes = a.axes();
  DefaultPool().ParallelFor(a.rows, [&](int64_t begin, int64_t end) {
    std::vector<float> cs(half), sn(half);
    for (int64_t r = begin; r < end; ++r) {
      for (int i = 0; i < half; ++i) {
        const double angle = static_cast<double>(a.positions[r * axes + axis[i]]) * inv_freq[i];
        cs[i] = static_cast<float>(std::cos(angle));
        sn[i] = static_cast<float>(std::sin(angle));
      }
      for (int h = 0; h < a.n_heads; ++h) {
        float* v = a.x + (r * a.n_heads + h) * a.head_dim;
        for (int i = 0; i < half; ++i) {
          const float x0 = v[i], x1 = v[i + half];
          v[i] = x0 * cs[i] - x1 * sn[i];
          v[i + half] = x1 * cs[i] + x0 * sn[i];
        }
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace hap::cpu
