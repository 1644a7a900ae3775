// HAP's scoring steps fused on the GPU (runtime/prune/hap_pruner.cc): a scored layer's head
// weights made with its map, and a stage's token scores made with its selection (and the map's
// PAQ when the stage's map is one layer's), each in one launch instead of two or three, with the
// arithmetic of the kernels they replace (paq_softmax.h, weighted_sum.h, token_scores.h, topk.h,
// paq.h), so the results are theirs bit for bit.
#pragma once

#include <cstdint>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// The most maps PaqSoftmaxSum takes (heads or layers: a few dozen in practice).
constexpr int kPaqSoftmaxSumMaxMaps = 1024;
// The most tokens TokenScoresTopK takes: one block, a thread per token.
constexpr int kTokenScoresTopKMaxTokens = 1024;

// weights = PaqSoftmaxWeights(paq, n_maps, temperature) and out[e] = Σ_c weights[c]·maps[c][e]:
// every block of the sum makes the weights in shared memory (thread 0's F64 sums over the n_maps
// values, the exponentials spread over its threads) and the first writes them out too.
//   maps: F32 [n_maps, size]   paq: F32 [n_maps]   weights: F32 [n_maps]   out: F32 [size]
//   (device; out aliases nothing). A non-finite PAQ makes every weight and element NaN.
// Errors: null pointers, non-positive sizes, n_maps > kPaqSoftmaxSumMaxMaps, a temperature that
// is not finite and > 0.
KernelStatus PaqSoftmaxSum(const float* maps, const float* paq, int n_maps, double temperature,
                           int64_t size, float* weights, float* out, Stream stream);

// scores[i] = (1/n_rows) Σ_j map[j, i] (TokenScores' sums, in its order) and kept = the stable
// top-k of the scores (StableTopK's, in the backend's memory): one block, thread i making score
// i and then ranking it.
//   map: F32 [n_rows, n_vis]   scores: F32 [n_vis]   kept: I32 [k], ascending (device)
// A NaN score writes −1 to every slot of kept, as StableTopK does. With map_paq (device, one
// value), the block first writes the map's PAQ there, as Paq(map, 1, n_rows, n_vis) writes it,
// bit for bit: a stage's map that is one layer's needs no launch of its own for it.
// Errors: null pointers, n_rows ≤ 0, n_vis outside [1, kTokenScoresTopKMaxTokens], k outside
// [1, n_vis].
KernelStatus TokenScoresTopK(const float* map, int64_t n_rows, int n_vis, int k, float* scores,
                             int* kept, Stream stream, float* map_paq = nullptr);

// PaqSoftmaxSum(maps, paq, n_maps, temperature, n_text·n_vis, weights, out), then
// TokenScoresTopK(out, n_text, n_vis, k, scores, kept, map_paq), in one launch: a stage whose map
// is one layer's, made and scored at once. The last of the sum's blocks to finish (counted in
// *done with an atomic add, which it sets back to 0) runs the second's body over the summed map,
// reading it through L2; the results are the two kernels' bit for bit. done: one device counter,
// 0 before the call and after it; a stream's calls may share it, calls on streams that can
// overlap may not. Errors: those of the two, and a null map_paq or done.
struct SumScoresArgs {
  const float* maps = nullptr;  // F32 [n_maps, n_text, n_vis]
  const float* paq = nullptr;   // F32 [n_maps]
  int n_maps = 0;
  double temperature = 1.0;
  int n_text = 0;
  int n_vis = 0;
  int k = 0;
  float* weights = nullptr;  // F32 [n_maps]
  float* out = nullptr;      // F32 [n_text, n_vis]: the map
  float* map_paq = nullptr;  // F32 [1]
  float* scores = nullptr;   // F32 [n_vis]
  int* kept = nullptr;       // I32 [k]
  unsigned* done = nullptr;
};
KernelStatus PaqSoftmaxSumScoresTopK(const SumScoresArgs& args, Stream stream);

}  // namespace hap::cuda
