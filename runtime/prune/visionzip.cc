// VisionZip: CLS-attention dominant tokens + similarity-merged contextual tokens.
#include "runtime/prune/visionzip.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace hap {

absl::StatusOr<VisionZipCounts> VisionZipSplit(double retain, int n_patches) {
  if (!std::isfinite(retain) || std::lround(retain) < 1 || n_patches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("visionzip: retain ", retain, " must be at least 1 token"));
  }
  const int r = static_cast<int>(std::lround(retain));
  if (r >= n_patches) return VisionZipCounts{};
  VisionZipCounts c;
  c.dominant = std::max(1, static_cast<int>(std::lround(r * 54.0 / 64.0)));
  c.contextual = r - c.dominant;
  return c;
}

absl::StatusOr<std::vector<float>> VisionZipCompress(const VisionZipInput& in,
                                                     const VisionZipCounts& counts,
                                                     VisionZipExplain* explain) {
  if (in.q == nullptr || in.k == nullptr || in.hidden == nullptr || in.backend == nullptr ||
      in.n_tokens < 2 || in.n_heads <= 0 || in.head_dim <= 0 || in.d_model <= 0 ||
      !(in.scale > 0.f)) {
    return absl::InvalidArgumentError("visionzip: bad input (null pointer or size)");
  }
  if (counts.dominant < 1 || counts.contextual < 0 || counts.total() > in.n_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("visionzip: counts ", counts.dominant, " + ",
                                                   counts.contextual, " do not fit ", in.n_tokens,
                                                   " tokens"));
  }
  const Backend& b = *in.backend;
  const PruningKernels& ops = b.pruning();
  const int n = in.n_tokens, H = in.n_heads, d = in.d_model;

  // CLS attention summed over heads: cls F32 [n]. Per head, the CLS row of the layer's
  // (non-causal) attention is TextVisualAttention of query row 0 over all n tokens, renormalised
  // over them (a softmax over every key: the full row): cls_heads F32 [H, 1, n]; the sum over
  // heads is a weighted sum with weights 1. Needed for the top-k and the explain record.
  BackendArray<float> cls_heads(b), cls(b);
  if (counts.dominant > 1 || explain != nullptr) {
    HAP_RETURN_IF_ERROR(cls_heads.Resize(static_cast<size_t>(H) * n));
    HAP_RETURN_IF_ERROR(cls.Resize(static_cast<size_t>(n)));
    TextVisualAttentionArgs rows;
    rows.q_text = in.q;  // row 0 of Q
    rows.k_vis = in.k;
    rows.n_text = 1;
    rows.n_vis = n;
    rows.n_heads = rows.n_kv_heads = H;
    rows.head_dim = in.head_dim;
    rows.scale = in.scale;
    rows.renormalize = true;
    rows.out = cls_heads.data();
    HAP_RETURN_IF_ERROR(ops.TextVisualAttention(rows));
    const std::vector<float> ones(H, 1.f);
    BackendArray<float> weights(b);  // F32 [H] of 1, in the backend's memory as the op takes it
    HAP_RETURN_IF_ERROR(weights.Assign(ones.data(), ones.size()));
    HAP_RETURN_IF_ERROR(
        ops.WeightedSumContiguous(cls_heads.data(), weights.data(), H, n, cls.data()));
  }

  // Dominant: CLS + top (dominant − 1) patches (patch p is token p + 1).
  std::vector<int> dominant = {0};
  if (counts.dominant > 1) {
    std::vector<int> top(counts.dominant - 1);
    HAP_RETURN_IF_ERROR(ops.StableTopK(cls.data() + 1, n - 1, counts.dominant - 1, top.data()));
    for (int p : top) dominant.push_back(p + 1);
  }
  std::vector<char> is_dominant(n, 0);
  for (int t : dominant) is_dominant[t] = 1;
  std::vector<int> rest;  // remaining tokens, original order
  for (int t = 0; t < n; ++t) {
    if (!is_dominant[t]) rest.push_back(t);
  }

  // rows F32 [dominant + contextual, d]: the dominant tokens' hidden rows, then the merged ones.
  BackendArray<float> rows(b);
  HAP_RETURN_IF_ERROR(rows.Resize(static_cast<size_t>(counts.total()) * d));
  HAP_RETURN_IF_ERROR(b.GatherRows(in.hidden, n, sizeof(float) * d, dominant.data(),
                                   static_cast<int64_t>(dominant.size()), rows.data()));
  std::vector<int> targets, sources, merged;
  if (counts.contextual > 0) {
    // Targets at positions 0, s, 2s, … of `rest`; the other remaining tokens are merged.
    const int n_rest = static_cast<int>(rest.size());
    const int step = std::max(1, n_rest / counts.contextual);
    std::vector<char> is_target(n_rest, 0);
    for (int c = 0; c < counts.contextual; ++c) {
      targets.push_back(rest[c * step]);
      is_target[c * step] = 1;
    }
    for (int r = 0; r < n_rest; ++r) {
      if (!is_target[r]) sources.push_back(rest[r]);
    }
    if (explain != nullptr) merged.assign(counts.contextual, 0);
    VisionZipMergeArgs m;
    m.k = in.k;
    m.hidden = in.hidden;
    m.n_tokens = n;
    m.n_heads = H;
    m.head_dim = in.head_dim;
    m.d_model = d;
    m.targets = targets.data();
    m.n_targets = counts.contextual;
    m.sources = sources.data();
    m.n_sources = static_cast<int>(sources.size());
    m.out = rows.data() + static_cast<size_t>(counts.dominant) * d;
    m.merged_count = explain != nullptr ? merged.data() : nullptr;
    HAP_RETURN_IF_ERROR(ops.VisionZipMerge(m));
  }
  std::vector<float> out(rows.size());
  HAP_RETURN_IF_ERROR(rows.CopyTo(out.data()));
  if (explain != nullptr) {
    explain->cls_attention.resize(n);
    HAP_RETURN_IF_ERROR(cls.CopyTo(explain->cls_attention.data()));
    explain->dominant = std::move(dominant);
    explain->targets = std::move(targets);
    explain->merged_count = std::move(merged);
  }
  return out;
}

}  // namespace hap
