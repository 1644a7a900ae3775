// CPU reference of VisionZipMerge.
#include "kernels/cpu/prune/visionzip_merge.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace hap::kernels {
namespace {

absl::Status CheckIndices(const int* idx, int n, int n_tokens, const char* what) {
  for (int i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= n_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "VisionZipMerge: ", what, "[", i, "] = ", idx[i], " outside [0, ", n_tokens, ")"));
    }
  }
  return absl::OkStatus();
}

// The head-mean key of token t, L2-normalised: F64 [hd] into key.
void UnitKey(const VisionZipMergeArgs& a, int t, double* key) {
  const int hd = a.head_dim;
  const float* kt = a.k + int64_t{t} * a.n_heads * hd;
  std::fill(key, key + hd, 0.0);
  for (int h = 0; h < a.n_heads; ++h) {
    for (int c = 0; c < hd; ++c) key[c] += kt[int64_t{h} * hd + c];
  }
  double norm = 0;
  for (int c = 0; c < hd; ++c) {
    key[c] /= a.n_heads;
    norm += key[c] * key[c];
  }
  // A zero key would be 0/0 in VisionZip; treat it as similar to nothing (similarity 0).
  norm = std::max(std::sqrt(norm), 1e-12);
  for (int c = 0; c < hd; ++c) key[c] /= norm;
}

}  // namespace

absl::Status VisionZipMerge(const VisionZipMergeArgs& a) {
  if (a.k == nullptr || a.hidden == nullptr || a.targets == nullptr || a.out == nullptr ||
      (a.n_sources > 0 && a.sources == nullptr)) {
    return absl::InvalidArgumentError("VisionZipMerge: null pointer argument");
  }
  if (a.n_tokens <= 0 || a.n_heads <= 0 || a.head_dim <= 0 || a.d_model <= 0 || a.n_targets <= 0 ||
      a.n_sources < 0) {
    return absl::InvalidArgumentError("VisionZipMerge: sizes must be positive");
  }
  if (absl::Status s = CheckIndices(a.targets, a.n_targets, a.n_tokens, "targets"); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckIndices(a.sources, a.n_sources, a.n_tokens, "sources"); !s.ok()) {
    return s;
  }
  const int hd = a.head_dim, d = a.d_model, n_tgt = a.n_targets;
  // Unit keys of the targets: F64 [n_targets, hd].
  std::vector<double> target_key(static_cast<size_t>(n_tgt) * hd);
  for (int c = 0; c < n_tgt; ++c) UnitKey(a, a.targets[c], target_key.data() + int64_t{c} * hd);

  std::vector<double> key(hd);
  std::vector<double> acc(static_cast<size_t>(n_tgt) * d, 0.0);  // F64 [n_targets, d]
  std::vector<int> count(n_tgt, 0);
  for (int s = 0; s < a.n_sources; ++s) {
    UnitKey(a, a.sources[s], key.data());
    int best = 0;
    double best_sim = -1e300;
    for (int c = 0; c < n_tgt; ++c) {
      const double* b = target_key.data() + int64_t{c} * hd;
      double sim = 0;
      for (int e = 0; e < hd; ++e) sim += key[e] * b[e];
      if (sim > best_sim) {
        best_sim = sim;
        best = c;
      }
    }
    ++count[best];
    const float* hs = a.hidden + int64_t{a.sources[s]} * d;
    for (int e = 0; e < d; ++e) acc[int64_t{best} * d + e] += hs[e];
  }
  for (int c = 0; c < n_tgt; ++c) {
    const float* ht = a.hidden + int64_t{a.targets[c]} * d;
    float* o = a.out + int64_t{c} * d;
    for (int e = 0; e < d; ++e) {
      const double mean = count[c] > 0 ? acc[int64_t{c} * d + e] / count[c] : 0.0;
      o[e] = static_cast<float>(ht[e] + mean);
    }
  }
  if (a.merged_count != nullptr) std::copy(count.begin(), count.end(), a.merged_count);
  return absl::OkStatus();
}

}  // namespace hap::kernels
