// VisionZip (docs/design.md §4): compresses the vision tower's feature-layer tokens before the
// projector — dominant tokens by CLS attention plus contextual tokens merged by key similarity.
// The LLM then runs unpruned on dominant + contextual tokens.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace hap {

struct VisionZipCounts {
  int dominant = 0;    // CLS + (dominant − 1) patches
  int contextual = 0;  // merged tokens
  int total() const { return dominant + contextual; }
  bool enabled() const { return total() > 0; }  // false: keep the tower's normal features
};

// Split of a retain target R = round(retain) (tokens entering the LLM): the design
// (docs/design.md §4) gives 64 = 54 + 10; other targets scale it,
// dominant = max(1, round(R·54/64)), contextual = R − dominant (this reproduces VisionZip's
// published 192 = 162 + 30 and 128 = 108 + 20). R ≥ n_patches → no compression ({0, 0}).
// InvalidArgument for R < 1 or a non-finite retain.
absl::StatusOr<VisionZipCounts> VisionZipSplit(double retain, int n_patches);

// The feature layer of the vision tower. Token 0 is CLS, tokens 1..n_tokens−1 the patches.
// q, k and hidden are in `backend`'s memory (host memory for the CPU backend).
struct VisionZipInput {
  const float* q = nullptr;       // F32 [n_tokens, n_heads·head_dim] the layer's attention Q
  const float* k = nullptr;       // F32 [n_tokens, n_heads·head_dim] the layer's attention K
  const float* hidden = nullptr;  // F32 [n_tokens, d_model] the layer's output hidden states
  int n_tokens = 0;
  int n_heads = 0;
  int head_dim = 0;
  int d_model = 0;
  float scale = 0.f;  // attention softmax scale (CLIP: head_dim^-0.5)
  // Runs every step: the CLS attention (TextVisualAttention of row 0 over all tokens, summed
  // over heads by WeightedSumContiguous), the top-k, the gather of the dominant rows and the
  // merge (VisionZipMerge). The host sees only the kept indices and the output rows.
  const Backend* backend = &CpuBackend();
};

// What VisionZipCompress chose (token indices into [0, n_tokens)), copied to the host.
struct VisionZipExplain {
  std::vector<float> cls_attention;  // [n_tokens] Σ_h softmax_i(scale·q_0·k_i); entry 0 is CLS
  std::vector<int> dominant;         // [dominant] ascending, starts with 0 (CLS)
  std::vector<int> targets;          // [contextual] the contextual tokens' target tokens
  std::vector<int> merged_count;     // [contextual] tokens averaged into each target
};

// Output F32 [dominant + contextual, d_model] (host memory: the projector's input):
//  - dominant rows: CLS and the (dominant − 1) patches with the largest CLS attention summed
//    over heads (ties → lower index), in original order;
//  - contextual rows: among the remaining R tokens (original order), targets at positions
//    0, s, 2s, … (s = max(1, R / contextual)); every other remaining token is assigned to the
//    target whose head-mean key has the largest cosine similarity with its own (ties → first
//    target); row c = hidden[target_c] + mean of hidden over the tokens assigned to it (just
//    hidden[target_c] when none is).
// Arithmetic: the CLS attention's logits and softmax are F32 per head (F64 row sums), the sum
// over heads F64 rounded once; keys, similarities and means F64 (kernels/cpu/prune/visionzip_merge.h).
// InvalidArgument for null pointers, non-positive sizes, dominant < 1, or
// dominant + contextual > n_tokens.
absl::StatusOr<std::vector<float>> VisionZipCompress(const VisionZipInput& in,
                                                     const VisionZipCounts& counts,
                                                     VisionZipExplain* explain = nullptr);

}  // namespace hap
