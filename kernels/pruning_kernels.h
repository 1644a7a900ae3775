// The ops that score and select visual tokens (docs/design.md §3–4), behind an interface of their
// own: each backend implements it beside its general ops (Backend::pruning()), and only the
// pruning methods (runtime/prune) and `hapctl explain` call it. Memory as in kernels/backend.h:
// a pointer is in the backend's memory unless a comment says "host".
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/op_args.h"

namespace hap {

class PruningKernels {
 public:
  virtual ~PruningKernels() = default;

  // Text→visual attention rows (kernels/cpu/prune/attention_rows.h documents the arithmetic).
  virtual absl::Status TextVisualAttention(const TextVisualAttentionArgs& args) const = 0;
  // paq: one value per map, in the backend's memory. A map that is not a distribution over the
  // visual tokens is InvalidArgument on the CPU backend; a device backend, which does not wait
  // to look, writes NaN for it instead, which PaqSoftmaxWeights carries on into the weights (the
  // caller checks the values it copies out).
  virtual absl::Status Paq(const float* maps, int n_maps, int n_text, int n_vis,
                           float* paq) const = 0;
  virtual absl::Status PaqFromRowEntropies(const float* maps, const double* row_entropy, int n_maps,
                                           int n_text, int n_vis, float* paq) const = 0;
  // TextVisualAttention(args) of renormalised rows with their entropies, then
  // PaqFromRowEntropies(args.out, args.row_entropy, args.n_heads, args.n_text, args.n_vis, paq):
  // a layer's head maps and each head's PAQ in one op (one launch on a GPU). InvalidArgument
  // without renormalize or row_entropy.
  virtual absl::Status TextVisualAttentionPaq(const TextVisualAttentionArgs& args,
                                              float* paq) const {
    if (!args.renormalize || args.row_entropy == nullptr) {
      return absl::InvalidArgumentError(
          "TextVisualAttentionPaq: needs renormalised rows and their entropies");
    }
    const absl::Status s = TextVisualAttention(args);
    return s.ok() ? PaqFromRowEntropies(args.out, args.row_entropy, args.n_heads, args.n_text,
                                        args.n_vis, paq)
                  : s;
  }
  // n is heads or layers; temperature τ > 0 and finite divides the centred PAQs (1 = the paper's
  // PAQ-softmax, bit for bit; InvalidArgument otherwise, on every backend). A non-finite PAQ:
  // InvalidArgument on the CPU backend, NaN weights on a device backend (see Paq).
  virtual absl::Status PaqSoftmaxWeights(const float* paq, int n, double temperature,
                                         float* weights) const = 0;
  // maps: a host array of n_maps map pointers (each in the backend's memory).
  virtual absl::Status WeightedSumMaps(const float* const* maps, const float* weights, int n_maps,
                                       int64_t size, float* out) const = 0;
  virtual absl::Status WeightedSumContiguous(const float* maps, const float* weights, int n_maps,
                                             int64_t size, float* out) const = 0;
  // PaqSoftmaxWeights(paq, n_maps, temperature, weights), then WeightedSumContiguous(maps,
  // weights, n_maps, size, out): a layer's head weights and its map in one op (one launch on a
  // GPU). The weights are written too (the explain record reads them).
  virtual absl::Status PaqSoftmaxSumContiguous(const float* maps, const float* paq, int n_maps,
                                               double temperature, int64_t size, float* weights,
                                               float* out) const {
    const absl::Status s = PaqSoftmaxWeights(paq, n_maps, temperature, weights);
    return s.ok() ? WeightedSumContiguous(maps, weights, n_maps, size, out) : s;
  }
  virtual absl::Status TokenScores(const float* map, int64_t n_rows, int n_vis,
                                   float* scores) const = 0;
  // rows: host.
  virtual absl::Status TokenScoresOfRows(const float* map, int64_t n_rows, int n_vis,
                                         const int* rows, int n_sel, float* scores) const = 0;
  // kept: host, k indices strictly ascending (score descending, ties to the lower index): a
  // device backend's wait for its stream, once per pruning stage.
  virtual absl::Status StableTopK(const float* scores, int n, int k, int* kept) const = 0;
  // StableTopK with kept in the backend's memory: nothing waits, so a pruning stage can be
  // decided and applied (Backend::GatherKeptRows) with no trip through the host. A NaN score is
  // InvalidArgument on the CPU backend; a device backend, which does not look, writes −1 to every
  // slot of kept, which the caller finds when it copies kept out.
  virtual absl::Status StableTopKToBackend(const float* scores, int n, int k,
                                           int32_t* kept) const = 0;
  // TokenScores(map, n_rows, n_vis, scores), then StableTopKToBackend(scores, n_vis, k, kept): a
  // stage's scores and selection in one op (one launch on a GPU, up to 1024 tokens).
  virtual absl::Status TokenScoresTopKToBackend(const float* map, int64_t n_rows, int n_vis, int k,
                                                float* scores, int32_t* kept) const {
    const absl::Status s = TokenScores(map, n_rows, n_vis, scores);
    return s.ok() ? StableTopKToBackend(scores, n_vis, k, kept) : s;
  }
  // Paq(map, 1, n_rows, n_vis, paq), then TokenScoresTopKToBackend(map, n_rows, n_vis, k, scores,
  // kept): a stage whose map is a single layer's makes that map's PAQ with its scores and
  // selection (one launch on a GPU, up to 1024 tokens). paq: one value, in the backend's memory.
  virtual absl::Status PaqTokenScoresTopKToBackend(const float* map, int n_rows, int n_vis, int k,
                                                   float* paq, float* scores, int32_t* kept) const {
    const absl::Status s = Paq(map, 1, n_rows, n_vis, paq);
    return s.ok() ? TokenScoresTopKToBackend(map, n_rows, n_vis, k, scores, kept) : s;
  }
  // PaqSoftmaxSumContiguous(maps, paq, n_maps, temperature, n_text·n_vis, weights, out), then
  // PaqTokenScoresTopKToBackend(out, n_text, n_vis, k, map_paq, scores, kept): a group of one
  // layer made, weighed and decided at once (one launch on a GPU, up to 1024 tokens).
  virtual absl::Status PaqSoftmaxSumScoresTopKToBackend(const float* maps, const float* paq,
                                                        int n_maps, double temperature, int n_text,
                                                        int n_vis, int k, float* weights,
                                                        float* out, float* map_paq, float* scores,
                                                        int32_t* kept) const {
    const absl::Status s = PaqSoftmaxSumContiguous(maps, paq, n_maps, temperature,
                                                   int64_t{n_text} * n_vis, weights, out);
    return s.ok() ? PaqTokenScoresTopKToBackend(out, n_text, n_vis, k, map_paq, scores, kept) : s;
  }
  // VisionZip's contextual rows. args.targets, args.sources and args.merged_count (optional:
  // the explain record's counts, a sync point on a GPU) are host; k, hidden and out are in the
  // backend's memory. VisionZip's CLS attention is TextVisualAttention + WeightedSumContiguous.
  virtual absl::Status VisionZipMerge(const VisionZipMergeArgs& args) const = 0;
};

}  // namespace hap
