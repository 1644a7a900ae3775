// HapPruner: layer aggregation every layer of a pruning group, group aggregation + top-k at its
// last layer.
#include "runtime/prune/hap_pruner.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace hap {

const char* HapPruner::MethodName(Weighting weighting, TokenSchedule schedule) {
  const bool flat = schedule == TokenSchedule::kFlat;
  if (weighting == Weighting::kUniform) return flat ? "uniform-flat" : "uniform";
  return flat ? "hap-flat" : "hap";
}

HapPruner::HapPruner(const Plan& plan, const ModelDims& dims, Weighting weighting)
    : PrunerBase(MethodName(weighting, plan.schedule), dims, plan.layer_visual_tokens),
      plan_(plan),
      weighting_(weighting) {}

PrunerBase::KeepResult HapPruner::AfterLayer(const LayerAttention& att) {
  HAP_ASSIGN_OR_RETURN(bool has_image, StartLayer(att));
  if (att.layer == 0) group_paq_.clear();
  const int g = plan_.GroupOfLayer(att.layer);
  // The last group never prunes, so its layers need no maps.
  if (!has_image || g < 0 || g >= plan_.M - 1) return std::optional<std::vector<int>>();

  const auto start = std::chrono::steady_clock::now();
  const int n_text = NumText(att), n_vis = att.n_vis, H = att.n_heads;
  if (n_text <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(stats_.method, ": layer ", att.layer,
                                                   " has no query text after the visual tokens "
                                                   "to score them"));
  }
  const int64_t map_size = int64_t{n_text} * n_vis;

  // Â_h for every head: F32 [H, n_text, n_vis], rows renormalised over the visual tokens, and
  // the entropy of each row, which gives PAQ(Â_h) without a logarithm per element.
  HAP_RETURN_IF_ERROR(RowsAttention(att, TextBegin(att), n_text, /*renormalize=*/true,
                                    &head_maps_, &head_entropy_));
  HapLayerExplain lx;
  lx.layer = att.layer;
  lx.n_vis = n_vis;
  lx.head_paq.resize(H);
  lx.head_weights.resize(H);
  HAP_RETURN_IF_ERROR(att.backend->PaqFromRowEntropies(head_maps_.data(), head_entropy_.data(), H,
                                                   n_text, n_vis, lx.head_paq.data()));
  if (weighting_ == Weighting::kUniform) {
    std::fill(lx.head_weights.begin(), lx.head_weights.end(), 1.f / H);
  } else {
    HAP_RETURN_IF_ERROR(att.backend->PaqSoftmaxWeights(lx.head_paq.data(), H, lx.head_weights.data()));
  }
  // A_l = Σ_h w_h Â_h: F32 [n_text, n_vis], into the group's next buffer.
  const size_t slot = group_paq_.size();
  if (group_maps_.size() <= slot) group_maps_.resize(slot + 1);
  BackendArray<float>& layer_map = group_maps_[slot];
  layer_map.Rebind(*att.backend);
  HAP_RETURN_IF_ERROR(layer_map.Resize(map_size));
  HAP_RETURN_IF_ERROR(att.backend->WeightedSumContiguous(head_maps_.data(), lx.head_weights.data(), H,
                                                     map_size, layer_map.data()));
  HAP_RETURN_IF_ERROR(att.backend->Paq(layer_map.data(), 1, n_text, n_vis, &lx.layer_paq));
  group_paq_.push_back(lx.layer_paq);
  stats_.hap_layers.push_back(std::move(lx));

  const PlanGroup& pg = plan_.groups[g];
  if (att.layer != pg.last_layer()) {
    AddTime(Since(start));
    return std::optional<std::vector<int>>();
  }

  // End of group g: A_g = Σ_l w_l A_l over its layers, s_i = mean_j A_g(j,i), keep top N_v(g+1).
  HapGroupExplain gx;
  gx.group = g;
  gx.first_layer = pg.first_layer;
  gx.n_layers = pg.n_layers;
  gx.layer_paq = group_paq_;
  const int n_maps = static_cast<int>(group_paq_.size());
  gx.layer_weights.resize(n_maps);
  if (weighting_ == Weighting::kUniform) {
    std::fill(gx.layer_weights.begin(), gx.layer_weights.end(), 1.f / n_maps);
  } else {
    HAP_RETURN_IF_ERROR(
        att.backend->PaqSoftmaxWeights(group_paq_.data(), n_maps, gx.layer_weights.data()));
  }
  std::vector<const float*> maps(n_maps);
  for (int i = 0; i < n_maps; ++i) maps[i] = group_maps_[i].data();
  group_map_.Rebind(*att.backend);
  token_scores_.Rebind(*att.backend);
  HAP_RETURN_IF_ERROR(group_map_.Resize(map_size));
  HAP_RETURN_IF_ERROR(token_scores_.Resize(n_vis));
  HAP_RETURN_IF_ERROR(att.backend->WeightedSumMaps(maps.data(), gx.layer_weights.data(), n_maps,
                                               map_size, group_map_.data()));
  HAP_RETURN_IF_ERROR(
      att.backend->TokenScores(group_map_.data(), n_text, n_vis, token_scores_.data()));
  const int keep = std::min(plan_.groups[g + 1].visual_tokens, n_vis);
  std::vector<int> kept(keep);
  HAP_RETURN_IF_ERROR(att.backend->StableTopK(token_scores_.data(), n_vis, keep, kept.data()));
  gx.token_scores.resize(n_vis);  // for the explain record
  HAP_RETURN_IF_ERROR(token_scores_.CopyTo(gx.token_scores.data()));
  group_paq_.clear();
  gx.kept = kept;
  gx.kept_original.resize(keep);
  for (int r = 0; r < keep; ++r) gx.kept_original[r] = present()[kept[r]];
  stats_.hap_groups.push_back(std::move(gx));
  return Commit(att, std::move(kept), Since(start));
}

}  // namespace hap
