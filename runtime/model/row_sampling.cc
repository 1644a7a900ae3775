#include "runtime/model/row_sampling.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace hap {
namespace {

// The rows `subset` of logits F32 [rows, vocab], contiguous for one op: the logits themselves
// when the subset is every row, else gathered into `scratch` on the backend (no wait).
absl::StatusOr<const float*> RowsOf(const Backend& backend, const float* logits, int rows,
                                    int vocab, const std::vector<int>& subset,
                                    BackendArray<float>& scratch) {
  if (static_cast<int>(subset.size()) == rows) return logits;
  HAP_RETURN_IF_ERROR(scratch.Resize(subset.size() * static_cast<size_t>(vocab)));
  HAP_RETURN_IF_ERROR(backend.GatherRows(logits, rows, sizeof(float) * vocab, subset.data(),
                                         static_cast<int64_t>(subset.size()), scratch.data()));
  return scratch.data();
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> SampleRows(const Backend& backend, const float* logits,
                                                int rows, int vocab,
                                                const std::vector<Sampler*>& samplers,
                                                RowSamplingCounts* counts) {
  if (rows < 0 || vocab <= 0 || samplers.size() != static_cast<size_t>(rows) ||
      std::find(samplers.begin(), samplers.end(), nullptr) != samplers.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SampleRows: %d rows of %d logits for %d samplers (none may be null)", rows, vocab,
        samplers.size()));
  }
  RowSamplingCounts local;
  std::vector<int32_t> tokens(rows, -1);
  std::vector<int> greedy, top, full;
  int k = 1;  // candidates per row: the most any sampler needs
  for (int r = 0; r < rows; ++r) {
    switch (samplers[r]->Needs(vocab)) {
      case Sampler::Need::kArgMax:
        greedy.push_back(r);
        break;
      case Sampler::Need::kTop:
        top.push_back(r);
        k = std::max(k, samplers[r]->TopCount(vocab));
        break;
      case Sampler::Need::kRow:
        full.push_back(r);
        break;
    }
  }

  if (!greedy.empty()) {
    BackendArray<float> scratch(backend);
    HAP_ASSIGN_OR_RETURN(const float* src, RowsOf(backend, logits, rows, vocab, greedy, scratch));
    std::vector<int32_t> ids(greedy.size());
    HAP_RETURN_IF_ERROR(
        backend.ArgMaxRows(src, static_cast<int>(greedy.size()), vocab, ids.data()));
    for (size_t i = 0; i < greedy.size(); ++i) tokens[greedy[i]] = ids[i];
    local.argmax = static_cast<int>(greedy.size());
  }

  std::vector<double> draws(rows, 0.0);
  std::vector<int> need_row;  // rows whose logits come back, in row order
  if (!top.empty()) {
    BackendArray<float> scratch(backend);
    HAP_ASSIGN_OR_RETURN(const float* src, RowsOf(backend, logits, rows, vocab, top, scratch));
    const int n = static_cast<int>(top.size());
    std::vector<float> temperature(n), values(static_cast<size_t>(n) * k);
    std::vector<int32_t> ids(static_cast<size_t>(n) * k);
    std::vector<double> sums(n);
    // A temperature of 0 spares the device a row's denominator that its sampler does not use.
    for (int i = 0; i < n; ++i) {
      const Sampler& s = *samplers[top[i]];
      temperature[i] = s.NeedsRowSum(vocab) ? s.temperature() : 0.f;
    }
    TopLogitsArgs a;
    a.logits = src;
    a.rows = n;
    a.n = vocab;
    a.k = k;
    a.temperature = temperature.data();
    a.values = values.data();
    a.ids = ids.data();
    a.row_sum = sums.data();
    HAP_RETURN_IF_ERROR(backend.TopLogits(a));
    for (int i = 0; i < n; ++i) {
      const int r = top[i];
      draws[r] = samplers[r]->Draw();
      const size_t at = static_cast<size_t>(i) * k;
      // ids −1: the row holds a NaN (TopLogitsArgs), which only the row itself reproduces.
      const int32_t token =
          ids[at] < 0 ? -1
                      : samplers[r]->FromTop(values.data() + at, ids.data() + at, k, vocab,
                                             sums[i], draws[r]);
      if (token >= 0) {
        tokens[r] = token;
        ++local.top;
      } else {
        need_row.push_back(r);
      }
    }
  }
  for (int r : full) {
    draws[r] = samplers[r]->Draw();
    need_row.push_back(r);
  }
  std::sort(need_row.begin(), need_row.end());

  std::vector<float> row(need_row.empty() ? 0 : vocab);
  for (int r : need_row) {
    HAP_RETURN_IF_ERROR(backend.CopyToHost(row.data(), logits + static_cast<int64_t>(r) * vocab,
                                           sizeof(float) * vocab));
    tokens[r] = samplers[r]->SampleRow(row.data(), vocab, draws[r]);
    ++local.full_rows;
  }
  if (counts != nullptr) *counts = local;
  return tokens;
}

}  // namespace hap
