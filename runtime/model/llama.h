// The LLaMA decoder of LLaVA: prefill (with an optional visual-token pruner called before layer
// 0 and after each layer) and single-token decode steps over a per-layer KV cache.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
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
  // Every op runs on `backend` (which must outlive the decoder).
  LlamaDecoder(const LlavaConfig& cfg, const TextWeights& weights, const Backend& backend);

  // Token embeddings F32 [n, hidden] for ids (InvalidArgument for an id outside the vocab).
  absl::StatusOr<std::vector<float>> Embed(const std::vector<int32_t>& ids) const;

  // x: F32 [n, hidden] input embeddings, positions [n]; visual rows are [vis_begin,
  // vis_begin + n_vis). Fills `cache` (one LayerKv per layer) and returns the logits
  // F32 [vocab] of the last row. `pruner` may be null (no pruning). Visual rows the pruner drops
  // in Begin never reach layer 0 (trace and cache count only the kept ones).
  absl::StatusOr<std::vector<float>> Prefill(std::vector<float> x, std::vector<int32_t> positions,
                                             int vis_begin, int n_vis, Pruner* pruner,
                                             KvCache* cache, PrefillTrace* trace) const;
  // Prefill with the last row's logits F32 [1, vocab] left in the backend's memory (`logits`,
  // on the decoder's backend), for a sampler that reads them there (runtime/model/row_sampling.h),
  // into any empty `cache` of n_layers() layers of kv_dim() (a DeviceKv on a device backend).
  absl::Status PrefillInto(std::vector<float> x, std::vector<int32_t> positions, int vis_begin,
                           int n_vis, Pruner* pruner, KvStore* cache, PrefillTrace* trace,
                           BackendArray<float>* logits) const;

  // Appends `token` at cache->next_position and returns the next logits F32 [vocab].
  absl::StatusOr<std::vector<float>> DecodeStep(int32_t token, KvStore* cache) const;

  // One decode step for b sequences at once: tokens[i] is appended to caches[i] (distinct
  // caches of any lengths and pruning). Every weight is read once for the whole batch; each
  // sequence's logits are exactly those of its own DecodeStep (the matmul is batch-invariant
  // up to the CPU backend's narrow-kernel rows, and attention runs per sequence). Returns F32 [b, vocab].
  // Errors from the checks before the first layer (bad batch, cache without prefill, context
  // full) leave every cache untouched; an error inside a layer leaves the caches unusable.
  absl::StatusOr<std::vector<float>> DecodeBatch(const std::vector<int32_t>& tokens,
                                                 const std::vector<KvStore*>& caches) const;
  // DecodeBatch with the logits F32 [b, vocab] left in the backend's memory (`logits`, on the
  // decoder's backend), for a sampler that reads them there (runtime/model/row_sampling.h).
  absl::Status DecodeBatchInto(const std::vector<int32_t>& tokens,
                               const std::vector<KvStore*>& caches,
                               BackendArray<float>* logits) const;
  // Whether `cache` can take another decode step: FailedPrecondition without a prefill,
  // OutOfRange once its next position reaches the context. DecodeBatch checks every cache.
  absl::Status CheckCanDecode(const KvStore& cache) const;

  int n_layers() const { return static_cast<int>(w_.layers.size()); }
  int kv_dim() const { return n_kv_heads_ * head_dim_; }

 private:
  // Rows [row, row + n) of a layer's input that belong to one sequence, whose keys and values
  // are appended to kv.
  struct KvSegment {
    KvStore* kv;
    int row;
    int n;
  };
  // A forward pass's activations in the backend's memory, sized once for its rows and reused
  // by every layer. After Layer(), q and k hold that layer's RoPE'd queries and new keys.
  struct Activations {
    explicit Activations(const Backend& b) : h(b), q(b), k(b), v(b), attn(b), gate(b), up(b) {}
    absl::Status Reserve(const LlamaDecoder& d, int n);
    BackendArray<float> h;     // F32 [n, hidden]
    BackendArray<float> q;     // F32 [n, heads·hd]
    BackendArray<float> k, v;  // F32 [n, kv_heads·hd]
    BackendArray<float> attn;  // F32 [n, heads·hd]
    BackendArray<float> gate, up;  // F32 [n, ffn]
  };
  // One layer over rows x F32 [n, hidden] (backend memory) made of `segments` (one per
  // sequence). positions: the rows' position ids, in backend memory (dev) and host memory.
  // Projections and the MLP run over all n rows at once; each segment's queries see its cached
  // rows and themselves causally: a segment into an empty layer is a prefill (rows attend to
  // each other), a single row into a filled one a decode step over the cache's spans. With a
  // single segment, lse (if non-null) receives F32 [n_heads, n] in backend memory.
  absl::Status Layer(int l, float* x, const int32_t* positions_dev,
                     const int32_t* positions_host, int n, const std::vector<KvSegment>& segments,
                     Activations& act, float* lse) const;
  // InvalidArgument for an id outside the vocabulary.
  absl::Status CheckTokenIds(const std::vector<int32_t>& ids) const;
  // Final norm and LM head over rows F32 [n, hidden] (backend memory) into `logits`
  // F32 [n, vocab] in the backend's memory.
  absl::Status LogitsInto(const float* rows, int n, BackendArray<float>* logits) const;

  const Backend& backend_;
  const LlavaConfig& cfg_;
  const TextWeights& w_;
  int d_, n_heads_, n_kv_heads_, head_dim_, ffn_, vocab_;
  float eps_, theta_, scale_;
};

}  // namespace hap
