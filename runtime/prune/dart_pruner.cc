// DartPruner: K-norm pivots, cosine duplication of the hidden states, per-pivot selection.
#include "runtime/prune/dart_pruner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/thread_pool.h"

namespace hap {
namespace {

// Indices of the `count` largest values (ties → lower index), in that order.
std::vector<int> TopByValue(const std::vector<double>& v, int count) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  count = std::clamp(count, 0, static_cast<int>(v.size()));
  std::partial_sort(idx.begin(), idx.begin() + count, idx.end(),
                    [&](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(count);
  return idx;
}

// ‖row‖₁ of each of n rows of width d (F64).
std::vector<double> L1Norms(const std::vector<float>& rows, int n, int d) {
  std::vector<double> out(n, 0.0);
  for (int r = 0; r < n; ++r) {
    const float* x = rows.data() + static_cast<size_t>(r) * d;
    for (int c = 0; c < d; ++c) out[r] += std::fabs(double{x[c]});
  }
  return out;
}

}  // namespace

int DartFullLayers(int n_layers) { return ScaleLayer(2, n_layers, 1, std::max(1, n_layers - 1)); }

absl::StatusOr<StageSchedule> DartSchedule(const ModelDims& dims, double target) {
  HAP_RETURN_IF_ERROR(dims.Validate());
  return OneStageSchedule("dart", dims.n_layers, dims.n_visual_tokens,
                          DartFullLayers(dims.n_layers), target);
}

DartPruner::DartPruner(const ModelDims& dims, StageSchedule schedule)
    : PrunerBase("dart", dims, schedule.LayerTokens(dims.n_layers, dims.n_visual_tokens)),
      schedule_(std::move(schedule)) {}

PrunerBase::KeepResult DartPruner::AfterLayer(const LayerAttention& att) {
  HAP_ASSIGN_OR_RETURN(bool has_image, StartLayer(att));
  if (att.layer == 0) {
    visual_pivots_.clear();
    text_pivots_.clear();
  }
  if (!has_image || schedule_.after_layer.empty() || att.layer != schedule_.after_layer[0]) {
    return std::optional<std::vector<int>>();
  }
  const int n_vis = att.n_vis;
  const int keep = std::min(schedule_.keep[0], n_vis);
  if (keep >= n_vis) return std::optional<std::vector<int>>();

  const auto start = std::chrono::steady_clock::now();
  if (att.k == nullptr || att.hidden == nullptr || att.d_model <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dart: layer ", att.layer, " passed no keys or no hidden states (LayerAttention::hidden)"));
  }
  // Rows [vis_begin, n_tokens): the visual tokens, then the query text. Keys F32 [rows, kv_dim]
  // and hidden states F32 [rows, d_model], copied to the host.
  const int n_text = NumText(att), rows = n_vis + n_text;
  const int kv_dim = att.n_kv_heads * att.head_dim, d = att.d_model;
  std::vector<float> keys(static_cast<size_t>(rows) * kv_dim);
  std::vector<float> hidden(static_cast<size_t>(rows) * d);
  HAP_RETURN_IF_ERROR(att.backend->CopyToHost(keys.data(),
                                              att.k + static_cast<int64_t>(att.vis_begin) * kv_dim,
                                              keys.size() * sizeof(float)));
  HAP_RETURN_IF_ERROR(att.backend->CopyToHost(hidden.data(),
                                              att.hidden + static_cast<int64_t>(att.vis_begin) * d,
                                              hidden.size() * sizeof(float)));

  // Pivots by K-norm: visual among rows [0, n_vis), text among rows [n_vis, rows).
  const std::vector<double> norms = L1Norms(keys, rows, kv_dim);
  visual_pivots_ = TopByValue(std::vector<double>(norms.begin(), norms.begin() + n_vis),
                              std::min(kVisualPivots, keep));
  text_pivots_ = TopByValue(std::vector<double>(norms.begin() + n_vis, norms.end()),
                            std::min(kTextPivots, n_text));
  std::vector<char> taken(n_vis, 0);
  for (int p : visual_pivots_) taken[p] = 1;
  std::vector<int> kept = visual_pivots_;

  const int remaining = keep - static_cast<int>(visual_pivots_.size());
  if (remaining > 0) {
    // Pivot rows (into the copied rows) in selection order, and cos(h_pivot, h_t) for every
    // visual token t: F64 [n_pivots, n_vis].
    std::vector<int> pivot_rows = visual_pivots_;
    for (int t : text_pivots_) pivot_rows.push_back(n_vis + t);
    const int n_pivots = static_cast<int>(pivot_rows.size());
    std::vector<double> inv_norm(rows, 0.0);
    for (int r = 0; r < rows; ++r) {
      const float* x = hidden.data() + static_cast<size_t>(r) * d;
      double s = 0.0;
      for (int c = 0; c < d; ++c) s += double{x[c]} * x[c];
      inv_norm[r] = s > 0.0 ? 1.0 / std::sqrt(s) : 0.0;
    }
    std::vector<double> cosine(static_cast<size_t>(n_pivots) * n_vis);
    DefaultPool().ParallelFor(n_vis, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const float* ht = hidden.data() + t * d;
        for (int i = 0; i < n_pivots; ++i) {
          const float* hp = hidden.data() + static_cast<size_t>(pivot_rows[i]) * d;
          double dot = 0.0;
          for (int c = 0; c < d; ++c) dot += double{hp[c]} * ht[c];
          cosine[static_cast<size_t>(i) * n_vis + t] = dot * inv_norm[pivot_rows[i]] * inv_norm[t];
        }
      }
    });
    // Each pivot in turn takes its share: the least duplicated tokens not yet taken.
    std::vector<int> candidates;
    for (int i = 0; i < n_pivots; ++i) {
      const int share = remaining / n_pivots + (i < remaining % n_pivots ? 1 : 0);
      if (share == 0) continue;
      const double* c = cosine.data() + static_cast<size_t>(i) * n_vis;
      candidates.clear();
      for (int t = 0; t < n_vis; ++t) {
        if (!taken[t]) candidates.push_back(t);
      }
      std::partial_sort(candidates.begin(), candidates.begin() + share, candidates.end(),
                        [&](int a, int b) { return c[a] < c[b] || (c[a] == c[b] && a < b); });
      for (int r = 0; r < share; ++r) {
        taken[candidates[r]] = 1;
        kept.push_back(candidates[r]);
      }
    }
  }
  std::sort(kept.begin(), kept.end());
  return Commit(att, std::move(kept), Since(start));
}

}  // namespace hap
