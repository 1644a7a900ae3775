// DivPrune (Alvar et al., CVPR 2025, "DivPrune: Diversity-based Visual Token Pruning for Large
// Multimodal Models"): before the LLM, keep the K visual tokens that form the most diverse
// subset of the image's token embeddings, as a max–min diversity problem (MMDP) solved greedily.
// No attention maps are used.
//
// The paper's definition. d(i, j) = 1 − cos(v_i, v_j) (cosine distance between visual token
// embeddings). MMDP: choose S, |S| = K, maximising min_{i≠j ∈ S} d(i, j). Greedy solution:
//   pick 1:  s_1 = argmax_i min_{j≠i} d(i, j)  (the token farthest from its nearest neighbour);
//   pick t:  s_t = argmax_{i ∉ S} min_{j ∈ S} d(i, j), until |S| = K.
// The kept tokens stay in their original order (and keep their original position ids).
//
// Choices where the paper is silent, or where this engine differs from its code:
//  - Embeddings: the projected visual tokens, i.e. the LLM's input embeddings of the image rows
//    (PrefillInput), as the authors' LLaVA-1.5 code applies DivPrune to the projector output
//    before layer 0.
//  - Pick 1: the authors' code takes, per token, the second-smallest entry of its distance
//    column (the smallest being its own 0), i.e. min_{j≠i} d(i, j) up to rounding; this is that
//    definition exactly. With V = 1 the only token is kept.
//  - Ties (equal scores in F64): the lower token index (torch.argmax's first maximum).
//  - A picked token is never picked again (the authors' code could re-pick one when every
//    remaining distance is 0, e.g. duplicate embeddings; here only unpicked tokens compete).
//  - Zero embedding (no direction): cosine 0 with every token, i.e. distance 1
//    (embedding_similarity.h); the authors' code would produce NaN.
//  - Budget (docs/design.md §4 convention): every layer sees the kept tokens, so keeping K is an
//    average of K visual tokens per layer; K = round(target) for a retain target, and a FLOPs
//    budget goes through HAP's plan average like the other baselines (TargetAverageTokens).
//    1 ≤ K and target ≤ V, else InvalidArgument (BeforeLlmKeepCount). K = V keeps everything.
//
// Host/device split: all of it runs on the host in Begin, from the embeddings PrefillInput holds
// in host memory on every backend (the decoder uploads them after Begin): the V×V cosine
// similarities in F64 (O(V²·d), rows in parallel; 2.6 MB for V = 576) and the O(K·V) greedy.
// The decoder then drops the other visual rows before layer 0 on the host, before uploading.
#pragma once

#include <vector>

#include "runtime/prune/model_dims.h"
#include "runtime/prune/pruner_base.h"

namespace hap {

class DivPrunePruner : public PrunerBase {
 public:
  // keep: K, the visual tokens every layer sees (BeforeLlmKeepCount).
  DivPrunePruner(const ModelDims& dims, int keep);

  // Selects the K tokens; required before layer 0.
  KeepResult Begin(const PrefillInput& input) override;
  bool ReadsInputEmbeddings() const override { return true; }
  KeepResult AfterLayer(const LayerAttention& att) override;

  int keep() const { return keep_; }
  // The last Begin's picks in the order the greedy made them (indices into the V tokens; empty
  // when nothing was pruned).
  const std::vector<int>& selection_order() const { return order_; }

 private:
  int keep_;
  std::vector<int> order_;
};

// The greedy max–min selection above over cosine similarities S (F64 [n, n], symmetric):
// min(k, n) picks in the order made.
std::vector<int> DivPruneOrder(const std::vector<double>& similarity, int n, int k);

}  // namespace hap
