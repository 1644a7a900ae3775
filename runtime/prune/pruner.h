// The interface between the decoder's prefill and a visual-token pruning method. The engine
// calls a Pruner once before layer 0 with the input embeddings (a method may choose its visual
// tokens there, before the LLM) and after each decoder layer with what that layer's attention
// computed; the method answers with the visual tokens to keep from the next layer on. Kernels
// that the methods use live in kernels/cpu/prune/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "runtime/prune/prune_stats.h"

namespace hap {

// What prefill layer `layer` exposes after its attention. The current sequence holds
// n_tokens rows in original order; the visual tokens still present are the contiguous rows
// [vis_begin, vis_begin + n_vis). Rows after them are the query text (N_t = n_tokens -
// vis_begin - n_vis).
// A pruning stage decided in the backend's memory (LayerAttention::backend_keep).
struct BackendKeep {
  // [count] indices into the n_vis visual tokens present, strictly ascending, in the backend's
  // memory, valid until Pruner::Finish.
  const int32_t* kept = nullptr;
  int count = 0;  // 0: no stage
};

struct LayerAttention {
  int layer = 0;
  int n_tokens = 0;
  int n_heads = 0;
  int n_kv_heads = 0;  // query head h reads kv head h / (n_heads / n_kv_heads)
  int head_dim = 0;
  float scale = 0.f;  // softmax scale, 1/sqrt(head_dim)
  const float* q = nullptr;    // F32 [n_tokens, n_heads * head_dim], after RoPE
  const float* k = nullptr;    // F32 [n_tokens, n_kv_heads * head_dim], after RoPE
  const float* lse = nullptr;  // F32 [n_heads, n_tokens]: log Σ_keys exp(scale·q·k) over the
                               // causal keys of each row (the softmax denominator)
  // Between one head's LSE row and the next; 0: n_tokens. A batched prefill's prompts share one
  // LSE of every prompt's rows, each prompt's rows a column range of it.
  int lse_stride = 0;
  int64_t LseStride() const { return lse_stride > 0 ? lse_stride : n_tokens; }
  int vis_begin = 0;
  int n_vis = 0;
  // The layer's output hidden states (the residual stream after its MLP, what the next layer
  // reads), F32 [n_tokens, d_model]; null where the caller passes none (DART needs them).
  const float* hidden = nullptr;
  int d_model = 0;
  // Runs the method's ops; q, k, lse and hidden are in its memory (host for the CPU backend).
  const Backend* backend = &CpuBackend();
  // Where the engine takes a stage decided in the backend's memory (a device backend's prefill;
  // null where the engine needs host lists). A method may fill it instead of returning a list,
  // and return std::nullopt: the engine then compacts on the backend, and nothing waits for the
  // device until the prefill ends, when the engine copies every such stage's indices back at once
  // and hands them to Finish. The count must be what the method's plan fixed in advance (the
  // host never learns the indices before Finish).
  BackendKeep* backend_keep = nullptr;
};

// Input embeddings before layer 0 (SparseVLM picks its raters from them; DivPrune and
// CDPruner-LLM choose the visual tokens from them). Host memory on every backend: the decoder
// receives the embeddings on the host and uploads them after Begin.
struct PrefillInput {
  const float* embeddings = nullptr;  // F32 [n_tokens, d_model], host
  int n_tokens = 0;
  int d_model = 0;
  int vis_begin = 0;
  int n_vis = 0;
  int n_layers = 0;
};

class Pruner {
 public:
  virtual ~Pruner() = default;

  // Called once per request before layer 0. Returning a value prunes before the LLM: the
  // engine keeps the listed visual tokens (indices into input's n_vis tokens, strictly
  // ascending) and drops the other visual rows (hidden states and position ids; the kept rows
  // keep their original positions) before layer 0, so every layer sees only them and the KV
  // cache never holds the dropped ones. std::nullopt keeps every token.
  virtual absl::StatusOr<std::optional<std::vector<int>>> Begin(const PrefillInput& input) {
    return std::optional<std::vector<int>>();
  }
  // Whether Begin reads input.embeddings. Otherwise a device backend builds the input rows in
  // its own memory, and Begin gets none.
  virtual bool ReadsInputEmbeddings() const { return false; }

  // Called after layer att.layer's attention. Returning a value prunes: the engine keeps the
  // listed visual tokens (indices into the n_vis tokens currently present, strictly ascending)
  // and drops the rest at the end of this layer, so layer att.layer + 1 on sees only them.
  // std::nullopt keeps every token.
  virtual absl::StatusOr<std::optional<std::vector<int>>> AfterLayer(const LayerAttention& att) = 0;

  // Called once after the last layer, before stats() is read. backend_kept: the kept lists of
  // the stages this method left in the backend's memory (LayerAttention::backend_keep), in
  // order, as the engine copied them back; their records are completed here. A method that
  // kept other records in the backend's memory to spare the device a wait per stage (HAP's
  // explain data on a GPU) brings them back here too, in one copy.
  virtual absl::Status Finish(const std::vector<std::vector<int>>& backend_kept) {
    if (backend_kept.empty()) return absl::OkStatus();
    return absl::InternalError("a pruning method that decides on the host got stages back");
  }

  // What the method did for this request so far (schedule, stages, timings, HAP explain).
  const PruneStats& stats() const { return stats_; }

 protected:
  PruneStats stats_;
};

}  // namespace hap
