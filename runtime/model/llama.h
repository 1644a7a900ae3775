// The LLaMA decoder of LLaVA: prefill (with an optional visual-token pruner called after each
// layer) and single-token decode steps over a per-layer KV cache.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/io/config.h"
#include "runtime/io/weights.h"
#include "runtime/model/kv_cache.h"
#include "runtime/prune/pruner.h"

namespace hap {

// Per-layer record of one prefill, for stats, traces and tests.
struct PrefillTrace {
  std::vector<int> tokens_per_layer;         // sequence rows each layer processed
  std::vector<int> visual_tokens_per_layer;  // visual rows each layer processed
  std::vector<double> layer_ms;              // wall time of each layer, pruner included
  std::vector<double> prune_ms;              // time inside the pruner after each layer
};

class LlamaDecoder {
 public:
  LlamaDecoder(const LlavaConfig& cfg, const TextWeights& weights);

  // Token embeddings F32 [n, hidden] for ids (InvalidArgument for an id outside the vocab).
  absl::StatusOr<std::vector<float>> Embed(const std::vector<int32_t>& ids) const;

  // x: F32 [n, hidden] input embeddings, positions [n]; visual rows are [vis_begin,
  // vis_begin + n_vis). Fills `cache` (one LayerKv per layer) and returns the logits
  // F32 [vocab] of the last row. `pruner` may be null (no pruning).
  absl::StatusOr<std::vector<float>> Prefill(std::vector<float> x, std::vector<int32_t> positions,
                                             int vis_begin, int n_vis, Pruner* pruner,
                                             KvCache* cache, PrefillTrace* trace) const;

  // Appends `token` at cache->next_position and returns the next logits F32 [vocab].
  absl::StatusOr<std::vector<float>> DecodeStep(int32_t token, KvCache* cache) const;

  int n_layers() const { return static_cast<int>(w_.layers.size()); }

 private:
  // One layer over rows x F32 [n, hidden] whose keys/values are appended to kv. Queries see
  // every earlier cached row and themselves causally. When lse is non-null it receives
  // F32 [n_heads, n]; q_out (if non-null) receives the RoPE'd queries F32 [n, n_heads·hd].
  absl::Status Layer(int l, float* x, const int32_t* positions, int n, LayerKv* kv,
                     std::vector<float>* q_out, std::vector<float>* lse) const;
  absl::StatusOr<std::vector<float>> Logits(const float* row) const;

  const LlavaConfig& cfg_;
  const TextWeights& w_;
  int d_, n_heads_, n_kv_heads_, head_dim_, ffn_, vocab_;
  float eps_, theta_, scale_;
};

}  // namespace hap
