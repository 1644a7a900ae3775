// Cosine similarities between token embeddings, for the methods that select visual tokens from
// the LLM's input embeddings before layer 0 (DivPrune, CDPruner-LLM). Host math in F64: the
// embeddings reach Pruner::Begin in host memory on every backend, and V×V for V = 576 is small.
#pragma once

#include <cstdint>
#include <vector>

namespace hap {

// Rows a[i] = base + i·row_stride, i < n, each d floats (host).
struct EmbeddingRows {
  const float* base = nullptr;
  int n = 0;
  int64_t row_stride = 0;  // floats between consecutive rows
  int d = 0;

  const float* row(int i) const { return base + i * row_stride; }
};

// ‖a[i]‖₂ for every row, F64 [n].
std::vector<double> RowNorms(const EmbeddingRows& a);

// S[i, j] = cos(a[i], a[j]) = a[i]·a[j] / (‖a[i]‖ ‖a[j]‖), F64 [n, n], symmetric, products and
// sums in F64. The diagonal is exactly 1. A zero row (norm 0) has no direction: its similarity
// to every row, itself included, is 0 (the papers' code would divide by zero).
std::vector<double> CosineSimilarityMatrix(const EmbeddingRows& a);

// r[i] = (1/m) Σ_j cos(a[i], b[j]) over the m rows of b (b.d = a.d), F64 [a.n] (zero rows:
// cosine 0; m = 0: all 0).
std::vector<double> MeanCosineSimilarity(const EmbeddingRows& a, const EmbeddingRows& b);

}  // namespace hap
