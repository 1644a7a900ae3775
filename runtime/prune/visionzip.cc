// VisionZip: CLS-attention dominant tokens + similarity-merged contextual tokens.
#include "runtime/prune/visionzip.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace hap {

absl::StatusOr<VisionZipCounts> VisionZipSplit(double retain, int n_patches) {
  if (!std::isfinite(retain) || std::lround(retain) < 1 || n_patches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("visionzip: retain ", retain, " must be at least 1 token"));
  }
  const int r = static_cast<int>(std::lround(retain));
  if (r >= n_patches) return VisionZipCounts{};
  VisionZipCounts c;
  c.dominant = std::max(1, static_cast<int>(std::lround(r * 54.0 / 64.0)));
  c.contextual = r - c.dominant;
  return c;
}

absl::StatusOr<std::vector<float>> VisionZipCompress(const VisionZipInput& in,
                                                     const VisionZipCounts& counts,
                                                     VisionZipExplain* explain) {
  if (in.q == nullptr || in.k == nullptr || in.hidden == nullptr || in.n_tokens < 2 ||
      in.n_heads <= 0 || in.head_dim <= 0 || in.d_model <= 0 || !(in.scale > 0.f)) {
    return absl::InvalidArgumentError("visionzip: bad input (null pointer or size)");
  }
  if (counts.dominant < 1 || counts.contextual < 0 || counts.total() > in.n_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("visionzip: counts ", counts.dominant, " + ",
                                                   counts.contextual, " do not fit ", in.n_tokens,
                                                   " tokens"));
  }
  const int n = in.n_tokens, H = in.n_heads, hd = in.head_dim, d = in.d_model;
  const int64_t qk_stride = int64_t{H} * hd;

  // CLS attention summed over heads: F32 [n].
  std::vector<float> cls(n, 0.f);
  std::vector<double> logit(n);
  for (int h = 0; h < H; ++h) {
    const float* q0 = in.q + int64_t{h} * hd;
    double mx = -1e300;
    for (int i = 0; i < n; ++i) {
      const float* ki = in.k + i * qk_stride + int64_t{h} * hd;
      double s = 0;
      for (int c = 0; c < hd; ++c) s += double{q0[c]} * ki[c];
      logit[i] = in.scale * s;
      mx = std::max(mx, logit[i]);
    }
    double z = 0;
    for (int i = 0; i < n; ++i) z += (logit[i] = std::exp(logit[i] - mx));
    for (int i = 0; i < n; ++i) cls[i] += static_cast<float>(logit[i] / z);
  }

  // Dominant: CLS + top (dominant − 1) patches (patch p is token p + 1).
  std::vector<int> dominant = {0};
  if (counts.dominant > 1) {
    std::vector<int> top(counts.dominant - 1);
    BackendArray<float> patch_scores(*in.backend);  // the scores in the backend's memory
    HAP_RETURN_IF_ERROR(patch_scores.Assign(cls.data() + 1, static_cast<size_t>(n - 1)));
    HAP_RETURN_IF_ERROR(
        in.backend->StableTopK(patch_scores.data(), n - 1, counts.dominant - 1, top.data()));
    for (int p : top) dominant.push_back(p + 1);
  }
  std::vector<char> is_dominant(n, 0);
  for (int t : dominant) is_dominant[t] = 1;
  std::vector<int> rest;  // remaining tokens, original order
  for (int t = 0; t < n; ++t) {
    if (!is_dominant[t]) rest.push_back(t);
  }

  std::vector<float> out(static_cast<size_t>(counts.total()) * d);
  for (size_t r = 0; r < dominant.size(); ++r) {
    std::copy_n(in.hidden + dominant[r] * int64_t{d}, d, out.begin() + r * d);
  }

  std::vector<int> targets, merged;
  if (counts.contextual > 0) {
    const int n_rest = static_cast<int>(rest.size());
    // Head-mean keys of the remaining tokens, L2-normalised: F32 [n_rest, hd].
    std::vector<double> key(static_cast<size_t>(n_rest) * hd, 0.0);
    for (int r = 0; r < n_rest; ++r) {
      double* kr = key.data() + int64_t{r} * hd;
      for (int h = 0; h < H; ++h) {
        const float* src = in.k + rest[r] * qk_stride + int64_t{h} * hd;
        for (int c = 0; c < hd; ++c) kr[c] += src[c];
      }
      double norm = 0;
      for (int c = 0; c < hd; ++c) {
        kr[c] /= H;
        norm += kr[c] * kr[c];
      }
      // A zero key would be 0/0 in VisionZip; treat it as similar to nothing (similarity 0).
      norm = std::max(std::sqrt(norm), 1e-12);
      for (int c = 0; c < hd; ++c) kr[c] /= norm;
    }
    const int step = std::max(1, n_rest / counts.contextual);
    std::vector<int> target_pos;  // positions in `rest`
    std::vector<int> target_of(n_rest, -1);
    for (int c = 0; c < counts.contextual; ++c) {
      target_pos.push_back(c * step);
      target_of[c * step] = c;
    }
    std::vector<double> acc(static_cast<size_t>(counts.contextual) * d, 0.0);
    merged.assign(counts.contextual, 0);
    for (int r = 0; r < n_rest; ++r) {
      if (target_of[r] >= 0) continue;
      int best = 0;
      double best_sim = -1e300;
      for (int c = 0; c < counts.contextual; ++c) {
        const double* a = key.data() + int64_t{r} * hd;
        const double* b = key.data() + int64_t{target_pos[c]} * hd;
        double sim = 0;
        for (int e = 0; e < hd; ++e) sim += a[e] * b[e];
        if (sim > best_sim) {
          best_sim = sim;
          best = c;
        }
      }
      ++merged[best];
      const float* hr = in.hidden + rest[r] * int64_t{d};
      for (int e = 0; e < d; ++e) acc[int64_t{best} * d + e] += hr[e];
    }
    for (int c = 0; c < counts.contextual; ++c) {
      const int t = rest[target_pos[c]];
      targets.push_back(t);
      const float* ht = in.hidden + t * int64_t{d};
      float* o = out.data() + (static_cast<size_t>(counts.dominant) + c) * d;
      for (int e = 0; e < d; ++e) {
        const double mean = merged[c] > 0 ? acc[int64_t{c} * d + e] / merged[c] : 0.0;
        o[e] = static_cast<float>(ht[e] + mean);
      }
    }
  }
  if (explain != nullptr) {
    explain->cls_attention = std::move(cls);
    explain->dominant = std::move(dominant);
    explain->targets = std::move(targets);
    explain->merged_count = std::move(merged);
  }
  return out;
}

}  // namespace hap
