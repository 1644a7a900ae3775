// CDPruner-LLM: CDPruner (Zhang et al., 2025, "Beyond Attention or Similarity: Maximizing
// Conditional Diversity for Token Pruning in MLLMs") with the instruction relevance taken from
// the LLM's own input embeddings instead of CLIP's text tower, which llava-hf checkpoints do not
// ship — hence the name: it is not the paper's relevance, and results are not the paper's.
// Before the LLM, keep the K visual tokens that maximise the conditional diversity of a
// determinantal point process (DPP). No attention maps are used.
//
// The paper's definition. S_ij = cos(v_i, v_j) over the visual tokens; r_i ≥ 0 the relevance of
// token i to the instruction, min-max normalised; conditional kernel
//   L = diag(r) · S · diag(r),  L_ij = r_i S_ij r_j;
// keep the MAP subset Y, |Y| = K, of the DPP with kernel L (argmax det L_Y), by the fast greedy
// MAP algorithm of Chen et al. (NeurIPS 2018, incremental Cholesky):
//   d_i² = L_ii;  j = argmax_i d_i²;  Y = {j};
//   repeat: for i ∉ Y: e_i = (L_ji − ⟨c_j, c_i⟩) / d_j, c_i ← [c_i, e_i], d_i² ← d_i² − e_i²;
//           j = argmax_{i ∉ Y} d_i²; Y ← Y ∪ {j}; until |Y| = K.
// d_i² is exactly det L_{Y∪{i}} / det L_Y, so each pick maximises the log-det increment. The
// kept tokens stay in their original order (and keep their original position ids).
//
// Here (choices where the paper is silent or does not apply):
//  - Visual embeddings v_i: the projected visual tokens, the LLM's input embeddings of the image
//    rows (PrefillInput); the authors' LLaVA code also builds S from the projector output.
//  - Relevance (replaces the paper's CLIP image/text embeddings): with e_t the input embeddings
//    of the query text — every prompt row after the last visual token (docs/design.md §3's T,
//    so the template's "\n" and " ASSISTANT:" are included: the pruner sees no token ids, as
//    for SparseVLM) —
//      m_i = (1/N_t) Σ_t cos(v_i, e_t),   r_i = (m_i − min m + 1e-6) / (max m − min m),
//    the min-max normalisation (with its 1e-6 offset, which keeps the least relevant token's
//    kernel row non-zero) of the authors' code. Their LLaVA code negates the CLIP similarity
//    first, a CLIP-specific observation of theirs; these are not CLIP embeddings, so the
//    paper's un-negated relevance is used. max m − min m ≤ 1e-12 (all tokens equally relevant):
//    r_i = 1, a plain DPP on S. No query text after the image: InvalidArgument.
//  - θ (relevance/diversity trade-off of Chen et al.: r ← exp(α r), α = θ / (2(1 − θ))): the
//    authors' code leaves it disabled (commented out, θ = 0.5), so its default — and this
//    method — uses the plain r of the kernel above; no θ is applied or exposed.
//  - Ties in argmax d_i² (equal in F64): the lower token index.
//  - Exhaustion: a candidate whose remaining gain is d_i² ≤ 1e-9 · L_ii (its embedding lies in
//    the span of the picked ones, up to rounding; or L_ii = 0 for a zero embedding) adds
//    nothing to det L_Y and is out of the greedy; when every candidate is out (K exceeds the
//    rank of S, e.g. K > d_model, or duplicate embeddings) the remaining picks are the unpicked
//    tokens by descending r (ties: lower index). The paper's code would divide by ~0.
//  - Zero embedding: cosine 0 with everything, S_ii = 0 (embedding_similarity.h).
//  - Budget as DivPrune (docs/design.md §4): keeping K is an average of K visual tokens per
//    layer; K = round(target); a FLOPs budget through HAP's plan average; 1 ≤ K and target ≤ V,
//    else InvalidArgument. K = V keeps everything.
//
// Host/device split: all of it runs on the host in Begin, from the embeddings PrefillInput holds
// in host memory on every backend (the decoder uploads them after Begin): S in F64 (O(V²·d)),
// the relevance (O(V·N_t·d)), the greedy (O(K²·V)). The decoder then drops the other visual rows
// before layer 0 on the host, before uploading.
#pragma once

#include <vector>

#include "runtime/prune/embedding_similarity.h"
#include "runtime/prune/model_dims.h"
#include "runtime/prune/pruner_base.h"

namespace hap {

class CdPrunerLlmPruner : public PrunerBase {
 public:
  // keep: K, the visual tokens every layer sees (BeforeLlmKeepCount).
  CdPrunerLlmPruner(const ModelDims& dims, int keep);

  // Selects the K tokens; required before layer 0.
  KeepResult Begin(const PrefillInput& input) override;
  bool ReadsInputEmbeddings() const override { return true; }
  KeepResult AfterLayer(const LayerAttention& att) override;

  int keep() const { return keep_; }
  // From the last Begin that pruned: r (F64 [V]) and the picks in the order the greedy made
  // them (indices into the V tokens).
  const std::vector<double>& relevance() const { return relevance_; }
  const std::vector<int>& selection_order() const { return order_; }

 private:
  int keep_;
  std::vector<double> relevance_;
  std::vector<int> order_;
};

// r above for the visual rows against the query-text rows (same width).
std::vector<double> CdPrunerRelevance(const EmbeddingRows& visual, const EmbeddingRows& text);

// The greedy MAP above for L = diag(r) · S · diag(r) (S: F64 [n, n] symmetric PSD, r: [n] ≥ 0),
// exhaustion rule included: min(k, n) picks in the order made.
std::vector<int> ConditionalDppOrder(const std::vector<double>& similarity,
                                     const std::vector<double>& relevance, int k);

}  // namespace hap
