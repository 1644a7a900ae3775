// VisionZip's contextual tokens (docs/design.md §4): each source token is assigned to the target
// token whose head-mean key has the largest cosine similarity with its own, and each output row
// is the target's hidden state plus the mean of its assigned tokens' hidden states.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace hap::kernels {

// Arguments of VisionZipMerge. The token lists are host memory for the Backend op (the CUDA
// backend uploads them); k, hidden and out are in the backend's memory.
struct VisionZipMergeArgs {
  const float* k = nullptr;       // F32 [n_tokens, n_heads·head_dim]; head h at [h·hd, (h+1)·hd)
  const float* hidden = nullptr;  // F32 [n_tokens, d_model]
  int n_tokens = 0;
  int n_heads = 0;
  int head_dim = 0;
  int d_model = 0;
  const int* targets = nullptr;  // [n_targets] token indices in [0, n_tokens)
  int n_targets = 0;
  const int* sources = nullptr;  // [n_sources] token indices, merged in this order; may be null
  int n_sources = 0;             // when 0
  float* out = nullptr;          // F32 [n_targets, d_model]
  // Optional, host memory for the Backend op: [n_targets] how many sources each target took.
  int* merged_count = nullptr;
};

// With key_t = Σ_h k[t, h, :] / n_heads (F64) and keŷ_t = key_t / max(‖key_t‖, 1e-12):
//   source s goes to c(s) = argmax_c keŷ_s · keŷ_{targets[c]} (ties → the lower c; a zero key
//   has similarity 0 with every target, so it goes to target 0 unless another is negative);
//   out[c, :] = hidden[targets[c], :] + (1/m_c) Σ_{s: c(s) = c} hidden[s, :]  (m_c the count;
//   just hidden[targets[c], :] when m_c = 0),
// keys, similarities and sums in F64 (sources summed in list order), out rounded once to F32.
// This is the plain reference (one thread): the merge is O((n_sources + n_targets)·n_heads·hd +
// n_sources·n_targets·hd + n_sources·d_model), a few million operations at CLIP-L's shapes.
// InvalidArgument on null pointers, non-positive sizes (n_sources may be 0), or an index
// outside [0, n_tokens).
absl::Status VisionZipMerge(const VisionZipMergeArgs& args);

}  // namespace hap::kernels
