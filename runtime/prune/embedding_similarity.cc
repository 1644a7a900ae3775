// Cosine similarity matrices of token embeddings (F64 host math, rows in parallel).
#include "runtime/prune/embedding_similarity.h"

#include <cmath>

#include "base/thread_pool.h"

namespace hap {
namespace {

// Σ_c x[c]·y[c] in F64, four interleaved partial sums (a fixed order: the same result on every
// run and backend, and independent chains the CPU can overlap).
double Dot(const float* x, const float* y, int d) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int c = 0;
  for (; c + 4 <= d; c += 4) {
    s0 += double{x[c]} * y[c];
    s1 += double{x[c + 1]} * y[c + 1];
    s2 += double{x[c + 2]} * y[c + 2];
    s3 += double{x[c + 3]} * y[c + 3];
  }
  for (; c < d; ++c) s0 += double{x[c]} * y[c];
  return (s0 + s1) + (s2 + s3);
}

// 1/‖row‖, or 0 for a zero row (so its cosines are 0).
std::vector<double> InverseNorms(const EmbeddingRows& a) {
  std::vector<double> inv = RowNorms(a);
  for (double& x : inv) x = x > 0 ? 1.0 / x : 0.0;
  return inv;
}

}  // namespace

std::vector<double> RowNorms(const EmbeddingRows& a) {
  std::vector<double> norms(a.n);
  for (int i = 0; i < a.n; ++i) norms[i] = std::sqrt(Dot(a.row(i), a.row(i), a.d));
  return norms;
}

std::vector<double> CosineSimilarityMatrix(const EmbeddingRows& a) {
  const int n = a.n;
  const std::vector<double> inv = InverseNorms(a);
  std::vector<double> s(static_cast<size_t>(n) * n);
  // Task i fills row i from the diagonal on and its mirror in column i: disjoint cells.
  DefaultPool().ParallelFor(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      s[i * n + i] = inv[i] > 0 ? 1.0 : 0.0;
      for (int64_t j = i + 1; j < n; ++j) {
        const double c =
            Dot(a.row(static_cast<int>(i)), a.row(static_cast<int>(j)), a.d) * inv[i] * inv[j];
        s[i * n + j] = c;
        s[j * n + i] = c;
      }
    }
  });
  return s;
}

std::vector<double> MeanCosineSimilarity(const EmbeddingRows& a, const EmbeddingRows& b) {
  const std::vector<double> inv_a = InverseNorms(a), inv_b = InverseNorms(b);
  std::vector<double> r(a.n, 0.0);
  if (b.n == 0) return r;
  DefaultPool().ParallelFor(a.n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      double sum = 0;
      for (int j = 0; j < b.n; ++j) {
        sum += Dot(a.row(static_cast<int>(i)), b.row(j), a.d) * inv_a[i] * inv_b[j];
      }
      r[i] = sum / b.n;
    }
  });
  return r;
}

}  // namespace hap
