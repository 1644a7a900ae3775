// DivPrunePruner: greedy max–min cosine-distance selection of visual tokens before the LLM.
#include "runtime/prune/divprune_pruner.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "base/status_macros.h"
#include "runtime/prune/embedding_similarity.h"

namespace hap {

std::vector<int> DivPruneOrder(const std::vector<double>& similarity, int n, int k) {
  k = std::min(k, n);
  std::vector<int> order;
  if (k <= 0) return order;
  auto dist = [&](int i, int j) { return 1.0 - similarity[static_cast<size_t>(i) * n + j]; };
  // min_d[i]: pick 1, min_{j≠i} d(i, j); afterwards min_{j ∈ S} d(i, j).
  std::vector<double> min_d(n, std::numeric_limits<double>::infinity());
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (j != i) min_d[i] = std::min(min_d[i], dist(i, j));
    }
  }
  std::vector<bool> picked(n, false);
  for (int t = 0; t < k; ++t) {
    int best = -1;
    for (int i = 0; i < n; ++i) {  // strict > keeps the lower index on ties
      if (!picked[i] && (best < 0 || min_d[i] > min_d[best])) best = i;
    }
    order.push_back(best);
    picked[best] = true;
    if (t == 0) std::fill(min_d.begin(), min_d.end(), std::numeric_limits<double>::infinity());
    for (int i = 0; i < n; ++i) {
      if (!picked[i]) min_d[i] = std::min(min_d[i], dist(i, best));
    }
  }
  return order;
}

DivPrunePruner::DivPrunePruner(const ModelDims& dims, int keep)
    : PrunerBase("divprune", dims, std::vector<int>(dims.n_layers, keep)), keep_(keep) {
  RequireBegin();
}

PrunerBase::KeepResult DivPrunePruner::Begin(const PrefillInput& in) {
  const auto start = std::chrono::steady_clock::now();
  order_.clear();
  HAP_ASSIGN_OR_RETURN(bool has_image, StartBeforeLlm(in));
  if (!has_image || keep_ >= in.n_vis) return std::optional<std::vector<int>>();
  EmbeddingRows visual;  // F32 [V, d_model], the image rows
  visual.base = in.embeddings + static_cast<int64_t>(in.vis_begin) * in.d_model;
  visual.n = in.n_vis;
  visual.row_stride = in.d_model;
  visual.d = in.d_model;
  order_ = DivPruneOrder(CosineSimilarityMatrix(visual), in.n_vis, keep_);
  std::vector<int> kept = order_;
  std::sort(kept.begin(), kept.end());
  return CommitBeforeLlm(std::move(kept), Since(start));
}

PrunerBase::KeepResult DivPrunePruner::AfterLayer(const LayerAttention& att) {
  HAP_ASSIGN_OR_RETURN(bool has_image, StartLayer(att));
  (void)has_image;
  return std::optional<std::vector<int>>();
}

}  // namespace hap
