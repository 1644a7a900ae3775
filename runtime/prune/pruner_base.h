// Shared bookkeeping of the pruning methods: validates what the engine passes per layer, tracks
// which of the image's visual tokens are still present, records stats and timing, and computes
// attention rows of the current layer.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/prune/model_dims.h"
#include "runtime/prune/pruner.h"

namespace hap {

// The arguments of the text→visual attention rows of query rows [row0, row0 + n_rows) of `att`
// over its visual tokens (Backend::pruning().TextVisualAttention): q, k and the LSE where `att`
// has them, its shapes and scale; `out` and `row_entropy` are left for the caller.
TextVisualAttentionArgs TextVisualRowsOf(const LayerAttention& att, int row0, int n_rows,
                                         bool renormalize);

class PrunerBase : public Pruner {
 public:
  using KeepResult = absl::StatusOr<std::optional<std::vector<int>>>;

  // Completes the stages CommitInBackend recorded, from the engine's host copies of their kept
  // lists: InvalidArgument naming the layer for an entry outside the tokens present (the device
  // writes −1 where a token score was NaN) or a list that does not ascend.
  absl::Status Finish(const std::vector<std::vector<int>>& backend_kept) override;

 protected:
  // planned_layer_tokens: [L] visual tokens each layer is scheduled to process.
  PrunerBase(std::string method, const ModelDims& dims, std::vector<int> planned_layer_tokens);

  // Validates att against the model and the tokens this pruner left present, records the
  // layer's token count, and resets the per-request state when att.layer == 0. Returns false
  // when the request has no visual tokens (nothing to prune).
  absl::StatusOr<bool> StartLayer(const LayerAttention& att);

  // Applies a pruning decision made at the end of `layer`: kept indices into the present
  // tokens (strictly ascending). Records the stage; returns what AfterLayer should return.
  KeepResult Commit(const LayerAttention& att, std::vector<int> kept, double select_us);

  // A decision left in the backend's memory (att.backend_keep, which must be non-null): `count`
  // tokens kept at `kept` (backend memory, valid until Finish). Records the stage, whose kept
  // tokens are filled in by Finish; returns what AfterLayer should return (std::nullopt). A
  // stage decided on the host may not follow one of these in the same request (Internal).
  KeepResult CommitInBackend(const LayerAttention& att, const int32_t* kept, int count,
                             double select_us);
  // For methods that choose their visual tokens before the LLM (in Begin): validates `in`
  // (layout, embeddings, V as planned) and starts the request's record, which layer 0 then
  // continues instead of resetting. Returns false when the request has no visual tokens.
  absl::StatusOr<bool> StartBeforeLlm(const PrefillInput& in);
  // Applies a decision made in Begin: kept indices into the input's visual tokens (strictly
  // ascending). Records a stage with after_layer = PruneStage::kBeforeLlm; returns what Begin
  // should return.
  KeepResult CommitBeforeLlm(std::vector<int> kept, double select_us);
  // Makes layer 0 fail (FailedPrecondition) unless Begin started the request: for the methods
  // that prune in Begin, a caller skipping it would silently run unpruned.
  void RequireBegin() { require_begin_ = true; }

  // Attention of rows [row0, row0 + n_rows) of the current sequence on the visual tokens
  // present. out: F32 [n_heads, n_rows, n_vis] (resized; its buffer is reused across calls).
  // row_entropy (renormalize only, optional): F64 [n_heads, n_rows], each row's entropy.
  // head_paq (with row_entropy, optional): F32 [n_heads] in the backend's memory, each head's
  // PAQ, made with the rows (PruningKernels::TextVisualAttentionPaq).
  absl::Status RowsAttention(const LayerAttention& att, int row0, int n_rows, bool renormalize,
                             BackendArray<float>* out, BackendArray<double>* row_entropy = nullptr,
                             float* head_paq = nullptr) const;

  // Records time spent scoring/selecting in a layer that did not prune.
  void AddTime(double us) { stats_.score_select_us += us; }

  static int TextBegin(const LayerAttention& att) { return att.vis_begin + att.n_vis; }
  static int NumText(const LayerAttention& att) { return att.n_tokens - TextBegin(att); }

  const ModelDims& dims() const { return dims_; }
  // Indices into the image's V tokens of the tokens present now, ascending. Not known between
  // a stage decided in the backend's memory and Finish (the count is: n_present()).
  const std::vector<int>& present() const { return present_; }
  int n_present() const { return n_present_; }
  // Indices into stats().stages of the stages recorded by CommitInBackend and not yet completed.
  const std::vector<int>& backend_stages() const { return backend_stages_; }

  // Microseconds since `start`.
  static double Since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
        .count();
  }

 private:
  // Forgets the previous request's record (keeps the plan): n_vis tokens present.
  void ResetRequest(int n_vis);
  // Records a stage and makes `kept` (indices into the present tokens) the present set.
  KeepResult Record(int after_layer, std::vector<int> kept, double select_us);

  ModelDims dims_;
  std::vector<int> present_;
  int n_present_ = 0;
  std::vector<int> backend_stages_;
  int next_layer_ = 0;
  bool no_image_ = false;
  bool begun_ = false;          // StartBeforeLlm ran for the request layer 0 will start
  bool require_begin_ = false;  // RequireBegin()
};

// The visual tokens a pre-LLM method keeps for a target average of `target` tokens per layer
// (every layer sees the kept tokens, so keeping K is an average of K): K = round(target), half
// away from zero. InvalidArgument naming `method` unless 1 ≤ K and target ≤ V.
absl::StatusOr<int> BeforeLlmKeepCount(const std::string& method, double target, int n_visual);

// Keeps every token ("none", and "visionzip" whose compression happens in the vision tower);
// records the schedule so the achieved average is reported like any other method's.
class KeepAllPruner : public PrunerBase {
 public:
  KeepAllPruner(std::string method, const ModelDims& dims);
  KeepResult AfterLayer(const LayerAttention& att) override;
};

}  // namespace hap
