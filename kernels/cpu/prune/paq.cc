// Paq: per map, one checking pass that accumulates p(v) exactly as the reference does (so H_v and
// the H_v ≤ 1e-12 test are the reference's to the bit), then
// I = p(t)·Σ_ij A(j,i)·(ln A(j,i) − ln p(v_i)) with a vectorisable logarithm and ln p(v) taken once
// per column. PaqFromRowEntropies skips the per-element logarithm: I = H_v − p(t)·Σ_j H(row j).
// PaqReference is the definition with one std::log per element.
#include "kernels/cpu/prune/paq.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/prune/vec_math.h"

namespace hap::kernels {
namespace {

absl::Status CheckSizes(const float* maps, int n_maps, int n_text, int n_vis, const float* paq) {
  if (maps == nullptr || paq == nullptr) return absl::InvalidArgumentError("Paq: null pointer");
  if (n_maps <= 0 || n_text <= 0 || n_vis <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Paq: sizes must be positive (n_maps=", n_maps,
                                                   " n_text=", n_text, " n_vis=", n_vis, ")"));
  }
  return absl::OkStatus();
}

constexpr int kLanes = 8;  // independent partial results, so the row reductions vectorise

// Σ_i a_i in F64.
double RowSum(const float* a, int n) {
  double s[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) s[l] += a[i + l];
  }
  for (; i < n; ++i) s[0] += a[i];
  double sum = 0.0;
  for (int l = 0; l < kLanes; ++l) sum += s[l];
  return sum;
}

// Whether some a_i is below zero. On the bits: a set sign bit with a non-zero rest (−0 passes,
// as it does a ≥ 0), which an integer max reduction finds without branching.
bool AnyNegative(const float* a, int n) {
  uint32_t mx = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t b = std::bit_cast<uint32_t>(a[i]);
    mx = b > mx ? b : mx;
  }
  return mx > 0x80000000u;
}

// p(v_i) = Σ_j p(t)·A(j,i) of one map F32 [n_text, n_vis], summed in the reference's order.
// Returns false when a row fails the checks (a NaN or ±inf entry makes its sum NaN or infinite,
// so the sum test covers them); the caller then lets the reference name the bad entry.
bool Marginal(const float* a, int n_text, int n_vis, std::vector<double>* pv) {
  const double pt = 1.0 / n_text;
  std::fill(pv->begin(), pv->end(), 0.0);
  double* p = pv->data();
  bool ok = true;
  for (int j = 0; j < n_text; ++j) {
    const float* row = a + int64_t{j} * n_vis;
    ok &= std::abs(RowSum(row, n_vis) - 1.0) <= kPaqRowSumTolerance && !AnyNegative(row, n_vis);
    for (int i = 0; i < n_vis; ++i) p[i] += pt * row[i];
  }
  return ok;
}

// H_v = −Σ_i p(v_i) ln p(v_i), in the reference's order.
double EntropyOf(const std::vector<double>& pv) {
  double hv = 0.0;
  for (double p : pv) {
    if (p > 0.0) hv -= p * std::log(p);
  }
  return hv;
}

// Σ_i a_i·(ln a_i − ln_pv_i) over the a_i > 0 of one row, in F64.
double RowInformation(const float* a, const double* ln_pv, int n) {
  double s[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float x = a[i + l];
      const double t = double{x} * (vec::LogOfFloat(x) - ln_pv[i + l]);
      s[l] += x > 0.f ? t : 0.0;
    }
  }
  for (; i < n; ++i) {
    if (a[i] > 0.f) s[0] += double{a[i]} * (vec::LogOfFloat(a[i]) - ln_pv[i]);
  }
  double sum = 0.0;
  for (int l = 0; l < kLanes; ++l) sum += s[l];
  return sum;
}

float PaqOf(double mi, double hv) { return static_cast<float>(std::clamp(mi / hv, 0.0, 1.0)); }

}  // namespace

absl::Status Paq(const float* maps, int n_maps, int n_text, int n_vis, float* paq) {
  if (absl::Status s = CheckSizes(maps, n_maps, n_text, n_vis, paq); !s.ok()) return s;
  std::vector<double> pv(n_vis);     // p(v_i)
  std::vector<double> ln_pv(n_vis);  // ln p(v_i), 0 where p(v_i) = 0 (no term reads it then)
  for (int m = 0; m < n_maps; ++m) {
    const float* a = maps + int64_t{m} * n_text * n_vis;  // F32 [n_text, n_vis]
    if (!Marginal(a, n_text, n_vis, &pv)) return PaqReference(maps, n_maps, n_text, n_vis, paq);
    const double hv = EntropyOf(pv);
    if (hv <= 1e-12) {
      paq[m] = 0.f;
      continue;
    }
    for (int i = 0; i < n_vis; ++i) ln_pv[i] = pv[i] > 0.0 ? std::log(pv[i]) : 0.0;
    double mi = 0.0;
    for (int j = 0; j < n_text; ++j) {
      mi += RowInformation(a + int64_t{j} * n_vis, ln_pv.data(), n_vis);
    }
    paq[m] = PaqOf(mi / n_text, hv);
  }
  return absl::OkStatus();
}

absl::Status PaqFromRowEntropies(const float* maps, const double* row_entropy, int n_maps,
                                 int n_text, int n_vis, float* paq) {
  if (absl::Status s = CheckSizes(maps, n_maps, n_text, n_vis, paq); !s.ok()) return s;
  if (row_entropy == nullptr) return absl::InvalidArgumentError("Paq: null row entropies");
  std::vector<double> pv(n_vis);  // p(v_i)
  for (int m = 0; m < n_maps; ++m) {
    const float* a = maps + int64_t{m} * n_text * n_vis;  // F32 [n_text, n_vis]
    if (!Marginal(a, n_text, n_vis, &pv)) return PaqReference(maps, n_maps, n_text, n_vis, paq);
    double h_rows = 0.0;  // Σ_j H(row j)
    for (int j = 0; j < n_text; ++j) {
      const double h = row_entropy[int64_t{m} * n_text + j];
      if (!std::isfinite(h)) {
        return absl::InvalidArgumentError(
            absl::StrCat("Paq: map ", m, " row ", j, " has entropy ", h));
      }
      h_rows += h;
    }
    const double hv = EntropyOf(pv);
    paq[m] = hv <= 1e-12 ? 0.f : PaqOf(hv - h_rows / n_text, hv);
  }
  return absl::OkStatus();
}

absl::Status PaqReference(const float* maps, int n_maps, int n_text, int n_vis, float* paq) {
  if (absl::Status s = CheckSizes(maps, n_maps, n_text, n_vis, paq); !s.ok()) return s;
  std::vector<double> pv(n_vis);  // p(v_i)
  const double pt = 1.0 / n_text;
  for (int m = 0; m < n_maps; ++m) {
    const float* a = maps + int64_t{m} * n_text * n_vis;  // F32 [n_text, n_vis]
    std::fill(pv.begin(), pv.end(), 0.0);
    for (int j = 0; j < n_text; ++j) {
      const float* row = a + int64_t{j} * n_vis;
      double row_sum = 0.0;
      for (int i = 0; i < n_vis; ++i) {
        if (!(row[i] >= 0.f) || !std::isfinite(row[i])) {
          return absl::InvalidArgumentError(
              absl::StrCat("Paq: map ", m, " row ", j, " column ", i, " is ", row[i]));
        }
        row_sum += row[i];
        pv[i] += pt * row[i];
      }
      if (std::abs(row_sum - 1.0) > kPaqRowSumTolerance) {
        return absl::InvalidArgumentError(
            absl::StrCat("Paq: map ", m, " row ", j, " sums to ", row_sum, ", not 1"));
      }
    }
    const double hv = EntropyOf(pv);
    if (hv <= 1e-12) {
      paq[m] = 0.f;
      continue;
    }
    double mi = 0.0;
    for (int j = 0; j < n_text; ++j) {
      const float* row = a + int64_t{j} * n_vis;
      for (int i = 0; i < n_vis; ++i) {
        // row[i] > 0 implies pv[i] ≥ row[i]/n_text > 0.
        if (row[i] > 0.f) mi += pt * row[i] * std::log(row[i] / pv[i]);
      }
    }
    paq[m] = PaqOf(mi, hv);
  }
  return absl::OkStatus();
}

}  // namespace hap::kernels
