// Slow, direct reference computations for the pruning tests: full causal attention maps,
// PAQ by its definition, PAQ-softmax, and a top-k checker that compares kept index sets.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace hap::testref {

// Full causal softmax of one head: P[r][c] for c ≤ r (0 above the diagonal), from
// q F32 [n, H·hd] and k F32 [n, KVH·hd]. Also returns each row's log-sum-exp.
inline void CausalAttention(const std::vector<float>& q, const std::vector<float>& k, int n, int H,
                            int KVH, int hd, int h, double scale,
                            std::vector<std::vector<double>>* p, std::vector<double>* lse) {
  const int kvh = h / (H / KVH);
  p->assign(n, std::vector<double>(n, 0.0));
  lse->assign(n, 0.0);
  for (int r = 0; r < n; ++r) {
    std::vector<double> logit(r + 1);
    double mx = -1e300;
    for (int c = 0; c <= r; ++c) {
      double s = 0;
      for (int e = 0; e < hd; ++e) {
        s += double{q[int64_t{r} * H * hd + h * hd + e]} * k[int64_t{c} * KVH * hd + kvh * hd + e];
      }
      logit[c] = scale * s;
      mx = std::max(mx, logit[c]);
    }
    double z = 0;
    for (int c = 0; c <= r; ++c) z += std::exp(logit[c] - mx);
    (*lse)[r] = mx + std::log(z);
    for (int c = 0; c <= r; ++c) (*p)[r][c] = std::exp(logit[c] - (*lse)[r]);
  }
}

// PAQ straight from docs/design.md §3 (double; a: [n_text][n_vis], rows summing to 1).
inline double Paq(const std::vector<std::vector<double>>& a) {
  const int nt = static_cast<int>(a.size()), nv = static_cast<int>(a[0].size());
  std::vector<double> pv(nv, 0.0);
  for (int j = 0; j < nt; ++j)
    for (int i = 0; i < nv; ++i) pv[i] += a[j][i] / nt;
  double hv = 0, mi = 0;
  for (int i = 0; i < nv; ++i) {
    if (pv[i] > 0) hv -= pv[i] * std::log(pv[i]);
  }
  for (int j = 0; j < nt; ++j) {
    for (int i = 0; i < nv; ++i) {
      if (a[j][i] > 0) mi += a[j][i] / nt * std::log(a[j][i] / pv[i]);
    }
  }
  return hv <= 1e-12 ? 0.0 : mi / hv;
}

// w = softmax(paq − mean(paq)).
// tau: the PAQ-softmax temperature, w_c ∝ exp((PAQ_c − mean) / τ) (1 = the paper's).
inline std::vector<double> SoftmaxCentered(const std::vector<double>& paq, double tau = 1.0) {
  double mean = 0;
  for (double x : paq) mean += x;
  mean /= paq.size();
  std::vector<double> w(paq.size());
  double z = 0;
  for (size_t c = 0; c < paq.size(); ++c) z += (w[c] = std::exp((paq[c] - mean) / tau));
  for (double& x : w) x /= z;
  return w;
}

// Indices of the k largest scores (ties → lower index), ascending.
inline std::vector<int> TopKBySort(const std::vector<double>& s, int k) {
  std::vector<int> idx(s.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return s[a] > s[b]; });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

// Checks `kept` (from the code under test) against reference scores: k entries, strictly
// ascending (so no duplicates), in range, and equal as a set to the reference top-k — except
// that an index whose reference score is within `tie_tol` of the k-th largest may swap with
// another such index (a near-tie that float rounding may order either way). Returns the number
// of such swaps.
inline int ExpectKeptSet(const std::vector<int>& kept, const std::vector<double>& ref, int k,
                         double tie_tol, const std::string& what) {
  EXPECT_EQ(static_cast<int>(kept.size()), k) << what;
  for (size_t r = 0; r < kept.size(); ++r) {
    EXPECT_TRUE(kept[r] >= 0 && kept[r] < static_cast<int>(ref.size())) << what;
    if (r > 0) {
      EXPECT_LT(kept[r - 1], kept[r]) << what << ": not strictly ascending / duplicate";
    }
  }
  const std::vector<int> want = TopKBySort(ref, k);
  if (k == 0) return 0;
  std::vector<double> sorted = ref;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  const double kth = sorted[k - 1];
  std::set<int> a(kept.begin(), kept.end()), b(want.begin(), want.end());
  int swaps = 0;
  for (int i : a) {
    if (!b.count(i)) {
      ++swaps;
      EXPECT_LE(std::abs(ref[i] - kth), tie_tol)
          << what << ": kept " << i << " (score " << ref[i] << ") is not in the top-" << k
          << " (k-th score " << kth << ")";
    }
  }
  for (int i : b) {
    if (!a.count(i)) {
      EXPECT_LE(std::abs(ref[i] - kth), tie_tol)
          << what << ": dropped " << i << " (score " << ref[i] << ") belongs to the top-" << k;
    }
  }
  return swaps;
}

// cos(a, b) of two d-float rows straight from the definition in F64; 0 when either is zero.
inline double Cosine(const float* a, const float* b, int d) {
  double ab = 0, aa = 0, bb = 0;
  for (int c = 0; c < d; ++c) {
    ab += double{a[c]} * b[c];
    aa += double{a[c]} * a[c];
    bb += double{b[c]} * b[c];
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa) / std::sqrt(bb) : 0.0;
}

// DivPrune's greedy score of every token given the tokens already picked (rows: F32 [V, d]),
// recomputed from the embeddings (O(V²·d) per step): with none picked, min over every other
// token of the cosine distance 1 − cos; else min over the picked ones. Picked tokens: −inf.
inline std::vector<double> MaxMinScores(const std::vector<float>& rows, int V, int d,
                                        const std::vector<int>& picked) {
  std::vector<double> score(V, std::numeric_limits<double>::infinity());
  const std::set<int> in(picked.begin(), picked.end());
  for (int i = 0; i < V; ++i) {
    if (in.count(i)) {
      score[i] = -std::numeric_limits<double>::infinity();
      continue;
    }
    for (int j = 0; j < V; ++j) {
      if (j == i || (!picked.empty() && !in.count(j))) continue;
      score[i] = std::min(score[i], 1.0 - Cosine(&rows[size_t(i) * d], &rows[size_t(j) * d], d));
    }
  }
  return score;
}

// det of a square matrix (n×n, row-major) by Gaussian elimination with partial pivoting in
// long double; det of the empty matrix is 1.
inline long double Det(std::vector<long double> a, int n) {
  long double det = 1;
  for (int c = 0; c < n; ++c) {
    int p = c;
    for (int r = c + 1; r < n; ++r)
      if (std::fabs(a[size_t(r) * n + c]) > std::fabs(a[size_t(p) * n + c])) p = r;
    if (a[size_t(p) * n + c] == 0) return 0;
    if (p != c) {
      for (int k = 0; k < n; ++k) std::swap(a[size_t(p) * n + k], a[size_t(c) * n + k]);
      det = -det;
    }
    det *= a[size_t(c) * n + c];
    for (int r = c + 1; r < n; ++r) {
      const long double f = a[size_t(r) * n + c] / a[size_t(c) * n + c];
      for (int k = c; k < n; ++k) a[size_t(r) * n + k] -= f * a[size_t(c) * n + k];
    }
  }
  return det;
}

// The conditional DPP's greedy gain of every token given the picked ones, by determinants
// computed from scratch: det L_{Y∪{i}} / det L_Y with L_ij = r_i cos(v_i, v_j) r_j (the
// log-det increment is its log). rows: F32 [V, d]. Picked tokens: −inf.
inline std::vector<double> DppGains(const std::vector<float>& rows, int V, int d,
                                    const std::vector<double>& r, const std::vector<int>& picked) {
  // S_ij = cos(v_i, v_j); S_ii = 1 (0 for a zero row, which has no direction).
  auto sim = [&](int i, int j) {
    const double c = Cosine(&rows[size_t(i) * d], &rows[size_t(j) * d], d);
    return i == j ? (c > 0 ? 1.0 : 0.0) : c;
  };
  auto kernel = [&](const std::vector<int>& y) {
    const int n = static_cast<int>(y.size());
    std::vector<long double> l(size_t(n) * n);
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b)
        l[size_t(a) * n + b] = (long double)r[y[a]] * sim(y[a], y[b]) * r[y[b]];
    return l;
  };
  const int t = static_cast<int>(picked.size());
  const long double base = Det(kernel(picked), t);
  std::vector<double> gain(V, -std::numeric_limits<double>::infinity());
  const std::set<int> in(picked.begin(), picked.end());
  for (int i = 0; i < V; ++i) {
    if (in.count(i)) continue;
    std::vector<int> y = picked;
    y.push_back(i);
    gain[i] = static_cast<double>(Det(kernel(y), t + 1) / base);
  }
  return gain;
}

inline std::vector<float> RandomNormal(size_t n, uint64_t seed, float stddev = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace hap::testref
