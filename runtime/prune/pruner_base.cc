// PrunerBase: per-layer validation, present-token tracking, stage records.
#include "runtime/prune/pruner_base.h"

#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace hap {

PrunerBase::PrunerBase(std::string method, const ModelDims& dims,
                       std::vector<int> planned_layer_tokens)
    : dims_(dims) {
  stats_.method = std::move(method);
  stats_.n_layers = dims.n_layers;
  stats_.n_visual_tokens = dims.n_visual_tokens;
  stats_.planned_layer_tokens = std::move(planned_layer_tokens);
  double s = 0;
  for (int t : stats_.planned_layer_tokens) s += t;
  stats_.planned_average_visual_tokens = dims.n_layers > 0 ? s / dims.n_layers : 0;
}

void PrunerBase::ResetRequest(int n_vis) {
  next_layer_ = 0;
  no_image_ = n_vis == 0;
  present_.resize(n_vis);
  std::iota(present_.begin(), present_.end(), 0);
  n_present_ = n_vis;
  backend_stages_.clear();
  stats_.kept_original = present_;
  stats_.layer_tokens.clear();
  stats_.stages.clear();
  stats_.score_select_us = 0;
  stats_.hap_layers.clear();
  stats_.hap_groups.clear();
}

absl::StatusOr<bool> PrunerBase::StartBeforeLlm(const PrefillInput& in) {
  begun_ = false;
  if (in.vis_begin < 0 || in.n_vis < 0 || in.vis_begin + in.n_vis > in.n_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat(stats_.method, ": bad prefill input n_tokens=", in.n_tokens,
                     " vis_begin=", in.vis_begin, " n_vis=", in.n_vis));
  }
  if (in.n_vis > 0 && (in.embeddings == nullptr || in.d_model <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        stats_.method, ": the prefill input has no embeddings (d_model=", in.d_model, ")"));
  }
  if (in.n_vis != 0 && in.n_vis != dims_.n_visual_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(stats_.method, ": the prompt has ", in.n_vis,
                                                   " visual tokens; the plan is for ",
                                                   dims_.n_visual_tokens));
  }
  ResetRequest(in.n_vis);
  begun_ = true;
  return !no_image_;
}

absl::StatusOr<bool> PrunerBase::StartLayer(const LayerAttention& att) {
  if (att.layer == 0) {
    if (begun_) {
      // Begin started this request (and may have pruned before the LLM): continue its record.
      begun_ = false;
    } else {
      if (require_begin_) {
        return absl::FailedPreconditionError(
            absl::StrCat(stats_.method,
                         ": chooses its visual tokens before the LLM; Begin() with "
                         "the input embeddings must run before layer 0"));
      }
      // A new request (Begin is optional): forget the previous one's record, keep the plan.
      ResetRequest(att.n_vis);
      if (!no_image_ && att.n_vis != dims_.n_visual_tokens) {
        return absl::InvalidArgumentError(absl::StrCat(stats_.method, ": layer 0 has ", att.n_vis,
                                                       " visual tokens; the plan is for ",
                                                       dims_.n_visual_tokens));
      }
    }
  }
  if (att.layer != next_layer_ || att.layer >= dims_.n_layers) {
    return absl::FailedPreconditionError(absl::StrCat(stats_.method, ": expected layer ",
                                                      next_layer_, " of ", dims_.n_layers, ", got ",
                                                      att.layer));
  }
  if (att.n_vis != n_present_) {
    return absl::FailedPreconditionError(absl::StrCat(stats_.method, ": layer ", att.layer, " has ",
                                                      att.n_vis, " visual tokens, but ", n_present_,
                                                      " were kept"));
  }
  if (att.vis_begin < 0 || att.n_vis < 0 || att.vis_begin + att.n_vis > att.n_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat(stats_.method, ": bad layout n_tokens=", att.n_tokens,
                     " vis_begin=", att.vis_begin, " n_vis=", att.n_vis));
  }
  if (att.n_heads != dims_.n_heads || att.n_kv_heads != dims_.n_kv_heads ||
      att.head_dim != dims_.head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(stats_.method, ": attention has heads/kv_heads/head_dim ", att.n_heads, "/",
                     att.n_kv_heads, "/", att.head_dim, ", the model ", dims_.n_heads, "/",
                     dims_.n_kv_heads, "/", dims_.head_dim));
  }
  if (!(att.scale > 0.f) || !std::isfinite(att.scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat(stats_.method, ": bad softmax scale ", att.scale));
  }
  ++next_layer_;
  stats_.layer_tokens.push_back(att.n_vis);
  return !no_image_;
}

PrunerBase::KeepResult PrunerBase::Commit(const LayerAttention& att, std::vector<int> kept,
                                          double select_us) {
  return Record(att.layer, std::move(kept), select_us);
}

PrunerBase::KeepResult PrunerBase::CommitBeforeLlm(std::vector<int> kept, double select_us) {
  return Record(PruneStage::kBeforeLlm, std::move(kept), select_us);
}

PrunerBase::KeepResult PrunerBase::CommitInBackend(const LayerAttention& att, const int32_t* kept,
                                                   int count, double select_us) {
  if (att.backend_keep == nullptr || kept == nullptr || count < 0 || count > n_present_) {
    return absl::InternalError(absl::StrCat(stats_.method, ": layer ", att.layer, " kept ", count,
                                            " of ", n_present_,
                                            " tokens in the backend's memory, where the engine "
                                            "takes none"));
  }
  stats_.score_select_us += select_us;
  PruneStage stage;
  stage.after_layer = att.layer;
  stage.tokens_before = n_present_;
  stage.tokens_kept = count;
  stage.select_us = select_us;
  backend_stages_.push_back(static_cast<int>(stats_.stages.size()));
  stats_.stages.push_back(std::move(stage));
  n_present_ = count;
  *att.backend_keep = BackendKeep{kept, count};
  return std::optional<std::vector<int>>();
}

absl::Status PrunerBase::Finish(const std::vector<std::vector<int>>& backend_kept) {
  if (backend_kept.size() != backend_stages_.size()) {
    return absl::InternalError(absl::StrCat(stats_.method, ": ", backend_kept.size(),
                                            " kept lists came back for ", backend_stages_.size(),
                                            " stages"));
  }
  for (size_t i = 0; i < backend_kept.size(); ++i) {
    PruneStage& stage = stats_.stages[backend_stages_[i]];
    const std::vector<int>& kept = backend_kept[i];
    if (static_cast<int>(kept.size()) != stage.tokens_kept ||
        stage.tokens_before != static_cast<int>(present_.size())) {
      return absl::InternalError(absl::StrCat(stats_.method, ": the stage after layer ",
                                              stage.after_layer, " kept ", kept.size(),
                                              " tokens; it recorded ", stage.tokens_kept));
    }
    for (size_t r = 0; r < kept.size(); ++r) {
      if (kept[r] < 0 || kept[r] >= stage.tokens_before || (r > 0 && kept[r] <= kept[r - 1])) {
        return absl::InvalidArgumentError(absl::StrCat(
            stats_.method, ": the selection after layer ", stage.after_layer, " kept token ",
            kept[r], " of ", stage.tokens_before,
            kept[r] < 0 ? " (a token score was NaN: a NaN has no rank)" : " (not ascending)"));
      }
    }
    std::vector<int> next(kept.size());
    for (size_t r = 0; r < kept.size(); ++r) next[r] = present_[kept[r]];
    stage.kept_original = next;
    present_ = std::move(next);
  }
  backend_stages_.clear();
  stats_.kept_original = present_;
  return absl::OkStatus();
}

PrunerBase::KeepResult PrunerBase::Record(int after_layer, std::vector<int> kept,
                                          double select_us) {
  if (!backend_stages_.empty()) {
    return absl::InternalError(absl::StrCat(stats_.method, ": a stage after layer ", after_layer,
                                            " decided on the host follows one decided in the "
                                            "backend's memory"));
  }
  stats_.score_select_us += select_us;
  std::vector<int> next(kept.size());
  for (size_t r = 0; r < kept.size(); ++r) next[r] = present_[kept[r]];
  PruneStage stage;
  stage.after_layer = after_layer;
  stage.tokens_before = static_cast<int>(present_.size());
  stage.tokens_kept = static_cast<int>(kept.size());
  stage.select_us = select_us;
  stage.kept_original = next;
  stats_.stages.push_back(std::move(stage));
  present_ = std::move(next);
  n_present_ = static_cast<int>(present_.size());
  stats_.kept_original = present_;
  return std::optional<std::vector<int>>(std::move(kept));
}

TextVisualAttentionArgs TextVisualRowsOf(const LayerAttention& att, int row0, int n_rows,
                                         bool renormalize) {
  TextVisualAttentionArgs a;
  const int64_t q_stride = int64_t{att.n_heads} * att.head_dim;
  const int64_t k_stride = int64_t{att.n_kv_heads} * att.head_dim;
  a.q_text = att.q + row0 * q_stride;
  a.k_vis = att.k + att.vis_begin * k_stride;
  a.lse = att.lse == nullptr ? nullptr : att.lse + row0;
  a.n_text = n_rows;
  a.n_vis = att.n_vis;
  a.n_heads = att.n_heads;
  a.n_kv_heads = att.n_kv_heads;
  a.head_dim = att.head_dim;
  a.q_stride = q_stride;
  a.k_stride = k_stride;
  a.lse_stride = att.LseStride();
  a.scale = att.scale;
  a.renormalize = renormalize;
  return a;
}

absl::Status PrunerBase::RowsAttention(const LayerAttention& att, int row0, int n_rows,
                                       bool renormalize, BackendArray<float>* out,
                                       BackendArray<double>* row_entropy, float* head_paq) const {
  if (att.q == nullptr || att.k == nullptr || (!renormalize && att.lse == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(stats_.method, ": layer ", att.layer, " passed no Q/K/LSE"));
  }
  if (row0 < 0 || n_rows <= 0 || row0 + n_rows > att.n_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(stats_.method, ": rows [", row0, ", ",
                                                   row0 + n_rows, ") outside the sequence of ",
                                                   att.n_tokens));
  }
  out->Rebind(*att.backend);
  HAP_RETURN_IF_ERROR(out->Resize(static_cast<size_t>(att.n_heads) * n_rows * att.n_vis));
  TextVisualAttentionArgs a = TextVisualRowsOf(att, row0, n_rows, renormalize);
  a.out = out->data();
  if (row_entropy != nullptr) {
    row_entropy->Rebind(*att.backend);
    HAP_RETURN_IF_ERROR(row_entropy->Resize(static_cast<size_t>(att.n_heads) * n_rows));
    a.row_entropy = row_entropy->data();
  }
  if (head_paq != nullptr) return att.backend->pruning().TextVisualAttentionPaq(a, head_paq);
  return att.backend->pruning().TextVisualAttention(a);
}

absl::StatusOr<int> BeforeLlmKeepCount(const std::string& method, double target, int n_visual) {
  if (!std::isfinite(target) || target > n_visual) {
    return absl::InvalidArgumentError(absl::StrCat(
        method, ": a target of ", target, " visual tokens exceeds the image's ", n_visual));
  }
  const long k = std::lround(target);
  if (k < 1) {
    return absl::InvalidArgumentError(absl::StrCat(method, ": a target of ", target,
                                                   " visual tokens keeps none (at least 1 of ",
                                                   n_visual, ")"));
  }
  return static_cast<int>(k);
}

KeepAllPruner::KeepAllPruner(std::string method, const ModelDims& dims)
    : PrunerBase(std::move(method), dims, std::vector<int>(dims.n_layers, dims.n_visual_tokens)) {}

PrunerBase::KeepResult KeepAllPruner::AfterLayer(const LayerAttention& att) {
  HAP_ASSIGN_OR_RETURN(bool has_image, StartLayer(att));
  (void)has_image;
  return std::optional<std::vector<int>>();
}

}  // namespace hap
