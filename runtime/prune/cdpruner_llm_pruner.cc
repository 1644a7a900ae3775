// CdPrunerLlmPruner: conditional-DPP (greedy MAP) selection of visual tokens before the LLM.
#include "runtime/prune/cdpruner_llm_pruner.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/status/status.h"
#include "base/status_macros.h"

namespace hap {
namespace {

constexpr double kRelevanceOffset = 1e-6;      // the authors' min-max offset
constexpr double kFlatRelevanceRange = 1e-12;  // max m − min m at or below: r = 1
constexpr double kExhausted = 1e-9;            // d_i² ≤ kExhausted · L_ii: no gain left

}  // namespace

std::vector<double> CdPrunerRelevance(const EmbeddingRows& visual, const EmbeddingRows& text) {
  std::vector<double> r = MeanCosineSimilarity(visual, text);
  if (r.empty()) return r;
  const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
  const double min = *lo, range = *hi - *lo;
  for (double& x : r) x = range <= kFlatRelevanceRange ? 1.0 : (x - min + kRelevanceOffset) / range;
  return r;
}

std::vector<int> ConditionalDppOrder(const std::vector<double>& similarity,
                                     const std::vector<double>& relevance, int k) {
  const int n = static_cast<int>(relevance.size());
  k = std::min(k, n);
  std::vector<int> order;
  if (k <= 0) return order;
  auto kernel = [&](int i, int j) {
    return relevance[i] * similarity[static_cast<size_t>(i) * n + j] * relevance[j];
  };
  std::vector<double> d2(n);        // d_i² = det L_{Y∪{i}} / det L_Y
  std::vector<bool> out(n, false);  // picked or exhausted
  for (int i = 0; i < n; ++i) {
    d2[i] = kernel(i, i);
    out[i] = !(d2[i] > 0);
  }
  std::vector<double> c(static_cast<size_t>(k) * n, 0.0);  // c[t·n + i]: row t of the Cholesky
  std::vector<bool> picked(n, false);
  for (int t = 0; t < k; ++t) {
    int j = -1;
    for (int i = 0; i < n; ++i) {  // strict > keeps the lower index on ties
      if (!out[i] && (j < 0 || d2[i] > d2[j])) j = i;
    }
    if (j < 0) break;  // every candidate is exhausted
    order.push_back(j);
    picked[j] = out[j] = true;
    if (t + 1 == k) break;
    const double dj = std::sqrt(d2[j]);
    for (int i = 0; i < n; ++i) {
      if (out[i]) continue;
      double dot = 0;
      for (int s = 0; s < t; ++s)
        dot += c[static_cast<size_t>(s) * n + j] * c[static_cast<size_t>(s) * n + i];
      const double e = (kernel(j, i) - dot) / dj;
      c[static_cast<size_t>(t) * n + i] = e;
      d2[i] -= e * e;
      if (!(d2[i] > kExhausted * kernel(i, i))) out[i] = true;
    }
  }
  if (static_cast<int>(order.size()) < k) {
    std::vector<int> rest;
    for (int i = 0; i < n; ++i) {
      if (!picked[i]) rest.push_back(i);
    }
    std::stable_sort(rest.begin(), rest.end(),
                     [&](int a, int b) { return relevance[a] > relevance[b]; });
    for (int i : rest) {
      if (static_cast<int>(order.size()) == k) break;
      order.push_back(i);
    }
  }
  return order;
}

CdPrunerLlmPruner::CdPrunerLlmPruner(const ModelDims& dims, int keep)
    : PrunerBase("cdpruner-llm", dims, std::vector<int>(dims.n_layers, keep)), keep_(keep) {
  RequireBegin();
}

PrunerBase::KeepResult CdPrunerLlmPruner::Begin(const PrefillInput& in) {
  const auto start = std::chrono::steady_clock::now();
  relevance_.clear();
  order_.clear();
  HAP_ASSIGN_OR_RETURN(bool has_image, StartBeforeLlm(in));
  if (!has_image || keep_ >= in.n_vis) return std::optional<std::vector<int>>();
  const int text_begin = in.vis_begin + in.n_vis;
  const int n_text = in.n_tokens - text_begin;
  if (n_text <= 0) {
    return absl::InvalidArgumentError(
        "cdpruner-llm: no query text after the visual tokens to take the relevance from");
  }
  EmbeddingRows visual, text;  // F32 [V, d_model] and [N_t, d_model]
  visual.base = in.embeddings + static_cast<int64_t>(in.vis_begin) * in.d_model;
  visual.n = in.n_vis;
  text.base = in.embeddings + static_cast<int64_t>(text_begin) * in.d_model;
  text.n = n_text;
  visual.row_stride = text.row_stride = visual.d = text.d = in.d_model;
  relevance_ = CdPrunerRelevance(visual, text);
  order_ = ConditionalDppOrder(CosineSimilarityMatrix(visual), relevance_, keep_);
  std::vector<int> kept = order_;
  std::sort(kept.begin(), kept.end());
  return CommitBeforeLlm(std::move(kept), Since(start));
}

PrunerBase::KeepResult CdPrunerLlmPruner::AfterLayer(const LayerAttention& att) {
  HAP_ASSIGN_OR_RETURN(bool has_image, StartLayer(att));
  (void)has_image;
  return std::optional<std::vector<int>>();
}

}  // namespace hap
