// HapPruner: layer aggregation every layer of a pruning group, group aggregation + top-k at its
// last layer. PAQs, weights and token scores stay in the backend's memory; so do the kept
// indices where the engine takes them there (a device backend's prefill: no wait per step). The
// explain records are filled when the step runs (CPU backend) or in Finish (a device backend).
#include "runtime/prune/hap_pruner.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace hap {

const char* HapPruner::MethodName(Weighting weighting, TokenSchedule schedule) {
  const bool flat = schedule == TokenSchedule::kFlat;
  if (weighting == Weighting::kUniform) return flat ? "uniform-flat" : "uniform";
  return flat ? "hap-flat" : "hap";
}

HapPruner::HapPruner(const Plan& plan, const ModelDims& dims, Weighting weighting,
                     double paq_temperature)
    : PrunerBase(MethodName(weighting, plan.schedule), dims, plan.layer_visual_tokens),
      plan_(plan),
      weighting_(weighting),
      paq_temperature_(paq_temperature) {
  stats_.paq_temperature = paq_temperature;
}

PrunerBase::KeepResult HapPruner::AfterLayer(const LayerAttention& att) {
  HAP_ASSIGN_OR_RETURN(bool has_image, StartLayer(att));
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
  const Backend& b = *att.backend;
  const PruningKernels& ops = b.pruning();
  const PlanGroup& pg = plan_.groups[g];
  // The group's layers run in order (StartLayer checks it) and n_vis is constant within it.
  const int slot = att.layer - pg.first_layer;
  const ScalarLayout at{pg.n_layers, H, n_vis};
  if (g == 0 && slot == 0) {
    // Every scored group's scalars, laid out from the plan's group shapes.
    scalar_offsets_.assign(plan_.M - 1, 0);
    kept_offsets_.assign(plan_.M - 1, 0);
    size_t total = 0, total_kept = 0;
    for (int i = 0; i + 1 < plan_.M; ++i) {
      scalar_offsets_[i] = total;
      total += ScalarLayout{plan_.groups[i].n_layers, H, plan_.groups[i].visual_tokens}.size();
      kept_offsets_[i] = total_kept;
      total_kept += plan_.groups[i + 1].visual_tokens;
    }
    pending_.clear();
    scalars_.Rebind(b);
    HAP_RETURN_IF_ERROR(scalars_.Resize(total));
    if (att.backend_keep != nullptr) {
      kept_.Rebind(b);
      HAP_RETURN_IF_ERROR(kept_.Resize(total_kept));
    }
  }
  // The group's slot was sized for the plan's token count: more would overrun it.
  if (scalar_offsets_.size() != static_cast<size_t>(plan_.M - 1) || n_vis > pg.visual_tokens) {
    return absl::InternalError(absl::StrCat(stats_.method, ": layer ", att.layer, " of group ", g,
                                            " holds ", n_vis, " visual tokens, the plan ",
                                            pg.visual_tokens, ", or group 0 did not run first"));
  }
  float* scalars = scalars_.data() + scalar_offsets_[g];

  // Â_h for every head: F32 [H, n_text, n_vis], rows renormalised over the visual tokens, and
  // the entropy of each row, which gives PAQ(Â_h) without a logarithm per element: the maps and
  // the heads' PAQs in one op (one launch on a GPU).
  float* head_paq = scalars + at.head_paq(slot);          // F32 [H]
  float* head_weights = scalars + at.head_weights(slot);  // F32 [H]
  HAP_RETURN_IF_ERROR(RowsAttention(att, TextBegin(att), n_text, /*renormalize=*/true, &head_maps_,
                                    &head_entropy_, head_paq));
  // A_l = Σ_h w_h Â_h: F32 [n_text, n_vis], into the group's next buffer, with the head weights
  // (PAQ-softmax: one op).
  if (static_cast<int>(group_maps_.size()) <= slot) group_maps_.resize(slot + 1);
  BackendArray<float>& layer_map = group_maps_[slot];
  layer_map.Rebind(b);
  HAP_RETURN_IF_ERROR(layer_map.Resize(map_size));
  // A group of this one layer, whose stage is decided in the backend's memory, makes the layer
  // map's PAQ with its scores and selection, and with PAQ-softmax weights the map itself too (one
  // launch on a GPU: PaqSoftmaxSumScoresTopKToBackend).
  const bool device_stage = att.backend_keep != nullptr && !b.caps().host_memory;
  const bool paq_at_stage = device_stage && pg.n_layers == 1;
  const bool map_at_stage = paq_at_stage && weighting_ != Weighting::kUniform;
  if (weighting_ == Weighting::kUniform) {
    const std::vector<float> uniform(H, 1.f / H);
    HAP_RETURN_IF_ERROR(b.CopyToBackend(head_weights, uniform.data(), sizeof(float) * H));
    HAP_RETURN_IF_ERROR(
        ops.WeightedSumContiguous(head_maps_.data(), head_weights, H, map_size, layer_map.data()));
  } else if (!map_at_stage) {
    HAP_RETURN_IF_ERROR(ops.PaqSoftmaxSumContiguous(head_maps_.data(), head_paq, H,
                                                    paq_temperature_, map_size, head_weights,
                                                    layer_map.data()));
  }
  float* layer_paq = scalars + at.layer_paq() + slot;
  if (!paq_at_stage) {
    HAP_RETURN_IF_ERROR(ops.Paq(layer_map.data(), 1, n_text, n_vis, layer_paq));
  }
  if (att.layer != pg.last_layer()) {
    AddTime(Since(start));
    return std::optional<std::vector<int>>();
  }

  // End of group g: A_g = Σ_l w_l A_l over its layers, s_i = mean_j A_g(j,i), keep top N_v(g+1).
  // A group of one layer has w = [1] under either weighting (a softmax of one value), so A_g is
  // A_l itself, bit for bit: no weights or sum are computed (RecordGroup reports the 1).
  const int n_maps = pg.n_layers;
  const float* group_map = group_maps_[0].data();
  if (n_maps > 1) {
    float* layer_weights = scalars + at.layer_weights();  // F32 [n_maps]
    if (weighting_ == Weighting::kUniform) {
      const std::vector<float> uniform(n_maps, 1.f / n_maps);
      HAP_RETURN_IF_ERROR(b.CopyToBackend(layer_weights, uniform.data(), sizeof(float) * n_maps));
    } else {
      HAP_RETURN_IF_ERROR(ops.PaqSoftmaxWeights(scalars + at.layer_paq(), n_maps,
                                                paq_temperature_, layer_weights));
    }
    std::vector<const float*> maps(n_maps);
    for (int i = 0; i < n_maps; ++i) maps[i] = group_maps_[i].data();
    group_map_.Rebind(b);
    HAP_RETURN_IF_ERROR(group_map_.Resize(map_size));
    HAP_RETURN_IF_ERROR(
        ops.WeightedSumMaps(maps.data(), layer_weights, n_maps, map_size, group_map_.data()));
    group_map = group_map_.data();
  }
  float* token_scores = scalars + at.token_scores();  // F32 [n_vis]
  const int keep = std::min(plan_.groups[g + 1].visual_tokens, n_vis);
  if (device_stage) {
    // Scored, decided and applied on the device; the indices and the explain record come back
    // in Finish.
    if (kept_.size() < kept_offsets_[g] + keep) {
      return absl::InternalError(absl::StrCat(stats_.method, ": no room for group ", g,
                                              "'s kept indices (the engine took the first "
                                              "group's on the host)"));
    }
    int32_t* kept = kept_.data() + kept_offsets_[g];
    HAP_RETURN_IF_ERROR(
        map_at_stage ? ops.PaqSoftmaxSumScoresTopKToBackend(
                           head_maps_.data(), head_paq, H, paq_temperature_, n_text, n_vis, keep,
                           head_weights, layer_map.data(), layer_paq, token_scores, kept)
        : paq_at_stage
            ? ops.PaqTokenScoresTopKToBackend(group_map, n_text, n_vis, keep, layer_paq,
                                              token_scores, kept)
            : ops.TokenScoresTopKToBackend(group_map, n_text, n_vis, keep, token_scores, kept));
    pending_.push_back({g, at, HapGroupExplain{}});
    return CommitInBackend(att, kept, keep, Since(start));
  }
  HAP_RETURN_IF_ERROR(ops.TokenScores(group_map, n_text, n_vis, token_scores));
  std::vector<int> kept(keep);
  // The stage's one wait for the device: the kept indices.
  const absl::Status selected = ops.StableTopK(token_scores, n_vis, keep, kept.data());
  HapGroupExplain gx;
  if (b.caps().host_memory || !selected.ok()) {
    // The scalars where they are (CPU), or, on a failed selection, copied now: a NaN PAQ found
    // there is the better error than the NaN scores StableTopK refuses.
    std::vector<float> host(at.size());
    HAP_RETURN_IF_ERROR(b.CopyToHost(host.data(), scalars, sizeof(float) * at.size()));
    HAP_RETURN_IF_ERROR(RecordGroup(g, at, host, &gx));
    HAP_RETURN_IF_ERROR(selected);
  }
  gx.kept = kept;
  gx.kept_original.resize(keep);
  for (int r = 0; r < keep; ++r) gx.kept_original[r] = present()[kept[r]];
  if (b.caps().host_memory) {
    stats_.hap_groups.push_back(std::move(gx));
  } else {
    pending_.push_back({g, at, std::move(gx)});
  }
  return Commit(att, std::move(kept), Since(start));
}

absl::Status HapPruner::Finish(const std::vector<std::vector<int>>& backend_kept) {
  std::vector<Pending> pending = std::move(pending_);
  pending_.clear();
  if (pending.empty()) return PrunerBase::Finish(backend_kept);
  // Every pending group's scalars in one copy. A NaN PAQ found there is the better error than
  // the −1s its scores left in the kept lists, so the records go first.
  std::vector<float> host(scalars_.size());
  HAP_RETURN_IF_ERROR(scalars_.CopyTo(host.data()));
  std::vector<HapGroupExplain> groups;
  for (Pending& p : pending) {
    const auto begin = host.begin() + static_cast<std::ptrdiff_t>(scalar_offsets_[p.group]);
    const std::vector<float> group(begin, begin + static_cast<std::ptrdiff_t>(p.at.size()));
    groups.push_back(std::move(p.explain));
    HAP_RETURN_IF_ERROR(RecordGroup(p.group, p.at, group, &groups.back()));
  }
  // Stages decided in the backend's memory: one per pending group, in order.
  const std::vector<int> stage_of = backend_stages();
  HAP_RETURN_IF_ERROR(PrunerBase::Finish(backend_kept));
  if (!stage_of.empty()) {
    if (stage_of.size() != groups.size()) {
      return absl::InternalError(absl::StrCat(stats_.method, ": ", stage_of.size(), " stages for ",
                                              groups.size(), " groups"));
    }
    for (size_t i = 0; i < groups.size(); ++i) {
      groups[i].kept = backend_kept[i];
      groups[i].kept_original = stats_.stages[stage_of[i]].kept_original;
    }
  }
  for (HapGroupExplain& gx : groups) stats_.hap_groups.push_back(std::move(gx));
  return absl::OkStatus();
}

absl::Status HapPruner::RecordGroup(int g, const ScalarLayout& at, const std::vector<float>& host,
                                    HapGroupExplain* gx) {
  const PlanGroup& pg = plan_.groups[g];
  for (int slot = 0; slot < at.G; ++slot) {
    HapLayerExplain lx;
    lx.layer = pg.first_layer + slot;
    lx.n_vis = at.n_vis;
    lx.head_paq.assign(host.begin() + at.head_paq(slot), host.begin() + at.head_paq(slot + 1));
    lx.head_weights.assign(host.begin() + at.head_weights(slot),
                           host.begin() + at.head_weights(slot + 1));
    lx.layer_paq = host[at.layer_paq() + slot];
    for (int h = 0; h < at.H; ++h) {
      if (std::isnan(lx.head_paq[h])) {
        return absl::InvalidArgumentError(absl::StrCat(
            stats_.method, ": layer ", lx.layer, " head ", h,
            ": PAQ is NaN: its text→visual map is not a distribution over the visual tokens (a "
            "negative or non-finite entry, or a row that does not sum to 1)"));
      }
    }
    if (std::isnan(lx.layer_paq)) {
      return absl::InvalidArgumentError(absl::StrCat(
          stats_.method, ": layer ", lx.layer,
          ": the PAQ of the layer's map is NaN: it is not a distribution over the visual tokens"));
    }
    stats_.hap_layers.push_back(std::move(lx));
  }
  gx->group = g;
  gx->first_layer = pg.first_layer;
  gx->n_layers = pg.n_layers;
  gx->layer_paq.assign(host.begin() + at.layer_paq(), host.begin() + at.layer_weights());
  if (at.G == 1) {
    gx->layer_weights = {1.f};  // not computed: a softmax over one layer
  } else {
    gx->layer_weights.assign(host.begin() + at.layer_weights(), host.begin() + at.head_paq(0));
  }
  gx->token_scores.assign(host.begin() + at.token_scores(), host.end());
  return absl::OkStatus();
}

}  // namespace hap
