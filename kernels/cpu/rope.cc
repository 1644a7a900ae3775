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

}  // namespace hap::cpu
