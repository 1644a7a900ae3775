// What a pruning method did for one request: the token schedule it ran, where it pruned, the
// time it spent, and for HAP/uniform an "explain" record (PAQs, weights, scores, kept tokens).
#pragma once

#include <string>
#include <vector>

namespace hap {

// One pruning event.
struct PruneStage {
  // after_layer of a stage that prunes before the LLM (Pruner::Begin: DivPrune, CDPruner-LLM):
  // "after layer −1", so tokens_kept is what layer 0 on sees and tokens_before is the image's.
  static constexpr int kBeforeLlm = -1;

  int after_layer = 0;    // tokens dropped at the end of this layer (kBeforeLlm: before layer 0)
  int tokens_before = 0;  // visual tokens present in that layer (kBeforeLlm: entering the LLM)
  int tokens_kept = 0;    // visual tokens from after_layer + 1 on
  double select_us = 0;   // scoring + selection time for this stage
  // The tokens kept after this stage, as indices into the image's V visual tokens, ascending.
  std::vector<int> kept_original;
};

// HAP/uniform, one decoder layer of a group that ends in a pruning step: PAQ-softmax over its
// heads.
struct HapLayerExplain {
  int layer = 0;
  int n_vis = 0;                    // visual tokens present in the layer
  std::vector<float> head_paq;      // [H] PAQ(Â_h)
  std::vector<float> head_weights;  // [H] PAQ-softmax weights (1/H for uniform)
  float layer_paq = 0;              // PAQ(A_l), A_l = Σ_h w_h Â_h
};

// HAP/uniform, one group that ended with a pruning step (groups 0..M−2).
struct HapGroupExplain {
  int group = 0;
  int first_layer = 0;
  int n_layers = 0;
  std::vector<float> layer_paq;      // [n_layers] PAQ_l of the group's layers
  std::vector<float> layer_weights;  // [n_layers] PAQ-softmax weights (1/|group| for uniform)
  std::vector<float> token_scores;   // [n_vis present] s_i = mean_j A_g(j,i)
  std::vector<int> kept;             // indices into the tokens present, ascending
  std::vector<int> kept_original;    // the same tokens as indices into the image's V tokens
};

struct PruneStats {
  std::string method;
  int n_layers = 0;
  int n_visual_tokens = 0;  // V as planned (for VisionZip: tokens leaving the vision tower)
  // [L] visual tokens each layer is scheduled to process, and their mean over layers.
  std::vector<int> planned_layer_tokens;
  double planned_average_visual_tokens = 0;
  // [layers seen] visual tokens each layer actually processed (from AfterLayer calls).
  std::vector<int> layer_tokens;
  std::vector<PruneStage> stages;
  double score_select_us = 0;      // Σ over every layer of the method's scoring/selection time
  std::vector<int> kept_original;  // visual tokens alive now, as indices into the V tokens

  std::vector<HapLayerExplain> hap_layers;  // HAP/uniform only
  std::vector<HapGroupExplain> hap_groups;  // HAP/uniform only
  // The PAQ-softmax temperature τ HAP's head and layer weights used (1 = the paper's; 1 for
  // every other method).
  double paq_temperature = 1.0;

  // Σ layer_tokens / n_layers: the achieved "average visual tokens per layer" once every layer
  // has run (0 before any layer ran).
  double achieved_average_visual_tokens() const {
    if (n_layers <= 0) return 0;
    double s = 0;
    for (int t : layer_tokens) s += t;
    return s / n_layers;
  }
};

}  // namespace hap
