#include "kernels/cpu/linear.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/thread_pool.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/narrow_matmul.h"

namespace hap::cpu {

namespace {

void AddBias(const float* bias, float* y, int m, int n) {
  if (bias == nullptr) return;
  for (int i = 0; i < m; ++i) {
    float* row = y + static_cast<int64_t>(i) * n;
    for (int j = 0; j < n; ++j) row[j] += bias[j];
  }
}

// Weight tiles widened for sgemm, one per pool thread: up to 4 MiB of F32 each, wide enough that
// sgemm runs near its best on them (narrow tiles cost it a third of its speed) and small enough
// that every thread's tile stays in the last-level cache between widening and use.
constexpr int64_t kTileFloats = int64_t{1} << 20;

}  // namespace

absl::Status Linear(const float* x, const float* w, const float* bias, float* y, int m, int k,
                    int n) {
  if (m < 0 || k <= 0 || n <= 0 || x == nullptr || w == nullptr || y == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("Linear: bad arguments m=%d k=%d n=%d", m, k, n));
  }
  if (m == 0) return absl::OkStatus();
  SingleThreadedBlas();
  // Each pool thread multiplies x by its own slice of the weight rows (output columns).
  DefaultPool().ParallelFor(n, [&](int64_t j0, int64_t j1) {
    const int cols = static_cast<int>(j1 - j0);
    if (m == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, cols, k, 1.f, w + j0 * k, k, x, 1, 0.f, y + j0, 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, cols, k, 1.f, x, k, w + j0 * k, k,
                  0.f, y + j0, n);
    }
  });
  AddBias(bias, y, m, n);
  return absl::OkStatus();
}

absl::Status Linear(const float* x, const TensorView& w, const float* bias, float* y, int m,
                    LinearRows rows) {
  if (w.shape.size() != 2 || w.device != Device::kCpu || !w.present() || !w.contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Linear: the weight must be a contiguous 2-D host tensor (Backend::PlaceWeight packs a "
        "strided one), got ",
        w.Describe()));
  }
  const int n = static_cast<int>(w.shape[0]);
  const int k = static_cast<int>(w.shape[1]);
  if (m < 0 || k <= 0 || n <= 0 || x == nullptr || y == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("Linear: bad arguments m=%d k=%d n=%d", m, k, n));
  }
  if (m == 0) return absl::OkStatus();
  if (m > kGemvRowsF32 && w.dtype == DType::kF32) return Linear(x, w.f32(), bias, y, m, k, n);
  const bool bf16_gemm =
      w.dtype == DType::kBF16 && HasBf16DotProduct() &&
      m > (rows == LinearRows::kOneSequence ? kBf16GemmRows - 1 : kGemvRowsNarrow);
  if (bf16_gemm) {
    Bf16Gemm(x, m, k, static_cast<const uint16_t*>(w.data), n, y);
  } else if (m <= kGemvRowsNarrow) {
    DefaultPool().ParallelFor(n, [&](int64_t j0, int64_t j1) {
      NarrowRowsTimesX(x, m, k, w.data, w.dtype, j0, j1, y, n);
    });
  } else {
    SingleThreadedBlas();
    // Each pool thread widens its slice of the weight rows tile by tile into its own buffer and
    // multiplies x by each tile.
    DefaultPool().ParallelFor(n, [&](int64_t c0, int64_t c1) {
      thread_local std::vector<float> tile;
      const int64_t rows = std::min<int64_t>(std::max<int64_t>(kTileFloats / k, 16), c1 - c0);
      tile.resize(static_cast<size_t>(rows * k));
      for (int64_t j0 = c0; j0 < c1; j0 += rows) {
        const int64_t j1 = std::min<int64_t>(c1, j0 + rows);
        WidenRows(w.data, w.dtype, k, j0, j1, tile.data());
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(j1 - j0), k,
                    1.f, x, k, tile.data(), k, 0.f, y + j0, n);
      }
    });
  }
  AddBias(bias, y, m, n);
  return absl::OkStatus();
}

void SetComputeThreads(int n_threads, int spin_us) {
  SetDefaultPoolThreads(n_threads, spin_us);
  SingleThreadedBlas();
}

void LinearReference(const float* x, const float* w, const float* bias, float* y, int m, int k,
                     int n) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double acc = bias ? bias[j] : 0.0;
      for (int t = 0; t < k; ++t) {
        acc += static_cast<double>(x[static_cast<int64_t>(i) * k + t]) * w[static_cast<int64_t>(j) * k + t];
      }
      y[static_cast<int64_t>(i) * n + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace hap::cpu
