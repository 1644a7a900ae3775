// Sampling a decode step's rows of logits where they are: through the backend's sampling ops
// (kernels/backend.h), a device sends back each greedy row's token id and each other row's top
// candidates (kernels/op_args.h TopLogitsArgs), and a row of logits only where those cannot
// decide the token exactly. Each row gets the token Sampler::Sample would draw from the whole
// row, with the same random draws: same seed, same tokens as on the CPU backend.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "runtime/model/sampler.h"

namespace hap {

// How the rows of one call were decided.
struct RowSamplingCounts {
  int argmax = 0;  // greedy rows: their token ids came back
  int top = 0;     // rows decided by their top candidates (and softmax denominator)
  // Rows whose logits came back: top_k between kMaxTopLogits and the vocabulary (no bounded
  // candidate set); a NaN logit (the order the sampler sorts by is undefined, so only the row
  // itself reproduces Sample); or a nucleus or draw that reached past the candidates or landed
  // within the rounding bound of a boundary (Sampler::FromTop).
  int full_rows = 0;
  // Rows sampled by Sampler::Sample on logits already in host memory (the CPU backend: nothing
  // to copy). SampleRows never sets it; LlavaModel's sampling calls do on the CPU backend.
  int host = 0;
};

// Tokens for the rows of logits F32 [rows, vocab] in `backend`'s memory, row r drawn by
// samplers[r] (each draws exactly as its Sample() would). Device→host traffic: one copy of the
// greedy rows' ids, one of the other rows' candidates (values, ids, F64 sums), and one row of
// logits per row counted in full_rows. Any backend works (on the CPU one the ops read host
// memory); the model uses this for device backends and samples host logits in place otherwise.
absl::StatusOr<std::vector<int32_t>> SampleRows(const Backend& backend, const float* logits,
                                                int rows, int vocab,
                                                const std::vector<Sampler*>& samplers,
                                                RowSamplingCounts* counts = nullptr);

}  // namespace hap
