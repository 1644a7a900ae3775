// SparseVlmPruner: rater selection from embeddings, rater-attention scoring at fixed layers.
#include "runtime/prune/sparsevlm_pruner.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/thread_pool.h"

namespace hap {

SparseVlmPruner::SparseVlmPruner(const ModelDims& dims, StageSchedule schedule)
    : PrunerBase("sparsevlm", dims, schedule.LayerTokens(dims.n_layers, dims.n_visual_tokens)),
      schedule_(std::move(schedule)) {}

PrunerBase::KeepResult SparseVlmPruner::Begin(const PrefillInput& in) {
  raters_.clear();
  relevance_.clear();
  n_text_ = -1;
  if (in.n_vis == 0) return std::optional<std::vector<int>>();
  if (in.embeddings == nullptr || in.d_model <= 0 || in.vis_begin < 0 || in.n_vis < 0 ||
      in.vis_begin + in.n_vis > in.n_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sparsevlm: bad prefill input (n_tokens=", in.n_tokens, " vis_begin=", in.vis_begin,
        " n_vis=", in.n_vis, " d_model=", in.d_model, ")"));
  }
  const int text_begin = in.vis_begin + in.n_vis;
  const int n_text = in.n_tokens - text_begin;
  if (n_text <= 0) {
    return absl::InvalidArgumentError("sparsevlm: no query text after the visual tokens");
  }
  // relevance_t = (1/V) Σ_v softmax_t(v·t): each visual embedding distributes one unit of mass
  // over the text tokens (no scale, as SparseVLM does on raw embeddings). The visual tokens are
  // independent, so their softmax rows are computed in parallel: F64 [n_vis, n_text].
  const int64_t d = in.d_model;
  std::vector<double> probs(static_cast<size_t>(in.n_vis) * n_text);
  DefaultPool().ParallelFor(in.n_vis, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      const float* ev = in.embeddings + (in.vis_begin + v) * d;
      double* row = probs.data() + v * n_text;
      double mx = -1e300;
      for (int t = 0; t < n_text; ++t) {
        const float* et = in.embeddings + (text_begin + t) * d;
        double s = 0.0;
        for (int64_t c = 0; c < d; ++c) s += double{ev[c]} * et[c];
        row[t] = s;
        mx = std::max(mx, s);
      }
      double z = 0.0;
      for (int t = 0; t < n_text; ++t) z += (row[t] = std::exp(row[t] - mx));
      for (int t = 0; t < n_text; ++t) row[t] /= z;
    }
  });
  std::vector<double> acc(n_text, 0.0);
  for (int v = 0; v < in.n_vis; ++v) {
    for (int t = 0; t < n_text; ++t) acc[t] += probs[static_cast<size_t>(v) * n_text + t];
  }
  double mean = 0.0;
  relevance_.resize(n_text);
  for (int t = 0; t < n_text; ++t) {
    relevance_[t] = static_cast<float>(acc[t] / in.n_vis);
    mean += acc[t] / in.n_vis;
  }
  mean /= n_text;
  for (int t = 0; t < n_text; ++t) {
    if (acc[t] / in.n_vis > mean) raters_.push_back(t);
  }
  // All tokens equally relevant (e.g. one text token): every text token rates.
  if (raters_.empty()) {
    for (int t = 0; t < n_text; ++t) raters_.push_back(t);
  }
  n_text_ = n_text;
  return std::optional<std::vector<int>>();
}

PrunerBase::KeepResult SparseVlmPruner::AfterLayer(const LayerAttention& att) {
  HAP_ASSIGN_OR_RETURN(bool has_image, StartLayer(att));
  if (!has_image) return std::optional<std::vector<int>>();
  const int keep = schedule_.KeepAfter(att.layer, att.n_vis);
  if (keep == 0) return std::optional<std::vector<int>>();

  const auto start = std::chrono::steady_clock::now();
  const int n_text = NumText(att);
  if (n_text_ < 0) {
    return absl::FailedPreconditionError(
        "sparsevlm: Begin() with the input embeddings must run "
        "before the first layer");
  }
  if (n_text != n_text_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sparsevlm: layer ", att.layer, " has ", n_text, " query-text rows, Begin saw ", n_text_));
  }
  // α of every query-text row for every head: F32 [H, n_text, n_vis], not renormalised.
  BackendArray<float> rows(*att.backend);
  HAP_RETURN_IF_ERROR(RowsAttention(att, TextBegin(att), n_text, /*renormalize=*/false, &rows));
  // Mean over heads and raters: rows h·n_text + r.
  std::vector<int> sel;
  for (int h = 0; h < att.n_heads; ++h) {
    for (int r : raters_) sel.push_back(h * n_text + r);
  }
  BackendArray<float> scores(*att.backend);  // F32 [n_vis]
  HAP_RETURN_IF_ERROR(scores.Resize(att.n_vis));
  HAP_RETURN_IF_ERROR(att.backend->pruning().TokenScoresOfRows(
      rows.data(), int64_t{att.n_heads} * n_text, att.n_vis, sel.data(),
      static_cast<int>(sel.size()), scores.data()));
  std::vector<int> kept(keep);
  HAP_RETURN_IF_ERROR(
      att.backend->pruning().StableTopK(scores.data(), att.n_vis, keep, kept.data()));
  return Commit(att, std::move(kept), Since(start));
}

absl::StatusOr<StageSchedule> SparseVlmSchedule(const ModelDims& dims, double target) {
  HAP_RETURN_IF_ERROR(dims.Validate());
  const int L = dims.n_layers, V = dims.n_visual_tokens;
  if (L < 4) return absl::InvalidArgumentError("sparsevlm needs at least 4 layers");
  if (!std::isfinite(target) || target <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("sparsevlm: bad target ", target));
  }
  StageSchedule s;
  if (target >= V) return s;
  // Outputs of 1-based layers 2, 6, 15 → 0-based after_layer 1, 5, 14 for 32 layers.
  std::vector<int> after = {ScaleLayer(2, L, 1, L - 3) - 1, ScaleLayer(6, L, 1, L - 2) - 1,
                            ScaleLayer(15, L, 1, L - 1) - 1};
  after[1] = std::max(after[1], after[0] + 1);
  after[2] = std::max(after[2], after[1] + 1);

  struct Anchor {
    double t;
    std::array<double, 3> c;
  };
  static constexpr std::array<Anchor, 4> kAnchors = {
      {{64, {66, 34, 20}}, {128, {238, 108, 60}}, {192, {300, 200, 118}}, {576, {576, 576, 576}}}};
  const double t = target * 576.0 / V;
  std::array<double, 3> c576{};
  if (t >= kAnchors[0].t) {
    for (size_t a = 0; a + 1 < kAnchors.size(); ++a) {
      if (t <= kAnchors[a + 1].t) {
        const double w = (t - kAnchors[a].t) / (kAnchors[a + 1].t - kAnchors[a].t);
        for (int i = 0; i < 3; ++i) c576[i] = (1 - w) * kAnchors[a].c[i] + w * kAnchors[a + 1].c[i];
        break;
      }
    }
  } else {
    const double len[4] = {double(after[0] + 1), double(after[1] - after[0]),
                           double(after[2] - after[1]), double(L - 1 - after[2])};
    double tail = 0;
    for (int i = 0; i < 3; ++i) tail += len[i + 1] * kAnchors[0].c[i];
    const double f = std::max(0.0, (L * t - len[0] * 576.0) / tail);
    for (int i = 0; i < 3; ++i) c576[i] = f * kAnchors[0].c[i];
  }
  for (int i = 0; i < 3; ++i) {
    int k = std::clamp(static_cast<int>(std::lround(c576[i] * V / 576.0)), 1, V);
    if (!s.keep.empty()) k = std::min(k, s.keep.back());
    s.after_layer.push_back(after[i]);
    s.keep.push_back(k);
  }
  HAP_RETURN_IF_ERROR(s.Validate(L, V));
  return s;
}

}  // namespace hap
