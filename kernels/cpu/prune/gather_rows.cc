// CPU reference of GatherRows and SequenceKeepRows.
#include "kernels/cpu/prune/gather_rows.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace hap::kernels {

absl::Status GatherRows(const void* src, int64_t n_batch, int64_t n_rows, size_t row_bytes,
                        const int* idx, int64_t n_idx, void* dst) {
  if (src == nullptr || dst == nullptr || (idx == nullptr && n_idx > 0) || n_batch < 0 ||
      n_rows < 0 || n_idx < 0) {
    return absl::InvalidArgumentError("GatherRows: null pointer or negative size");
  }
  const bool in_place = src == dst;
  for (int64_t r = 0; r < n_idx; ++r) {
    if (idx[r] < 0 || idx[r] >= n_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("GatherRows: index ", idx[r], " at ", r, " outside [0, ", n_rows, ")"));
    }
    if (in_place && r > 0 && idx[r] <= idx[r - 1]) {
      return absl::InvalidArgumentError("GatherRows: in-place gather needs ascending indices");
    }
  }
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  for (int64_t b = 0; b < n_batch; ++b) {
    const unsigned char* sb = s + b * n_rows * row_bytes;
    unsigned char* db = d + b * n_idx * row_bytes;
    for (int64_t r = 0; r < n_idx; ++r) {
      // In place, the destination row never lies after its source row (idx ascending,
      // n_idx ≤ n_rows) and later reads lie after both; memmove covers a row copied onto itself.
      std::memmove(db + r * row_bytes, sb + idx[r] * row_bytes, row_bytes);
    }
  }
  return absl::OkStatus();
}

absl::Status SequenceKeepRows(int n_tokens, int vis_begin, int n_vis, const int* kept_vis,
                              int n_kept, int* rows) {
  if (rows == nullptr || (kept_vis == nullptr && n_kept > 0) || vis_begin < 0 || n_vis < 0 ||
      vis_begin + n_vis > n_tokens || n_kept < 0 || n_kept > n_vis) {
    return absl::InvalidArgumentError(
        absl::StrCat("SequenceKeepRows: bad layout (n_tokens=", n_tokens, " vis_begin=", vis_begin,
                     " n_vis=", n_vis, " n_kept=", n_kept, ")"));
  }
  int out = 0;
  for (int r = 0; r < vis_begin; ++r) rows[out++] = r;
  for (int r = 0; r < n_kept; ++r) {
    if (kept_vis[r] < 0 || kept_vis[r] >= n_vis || (r > 0 && kept_vis[r] <= kept_vis[r - 1])) {
      return absl::InvalidArgumentError(
          "SequenceKeepRows: kept indices must be strictly ascending within [0, n_vis)");
    }
    rows[out++] = vis_begin + kept_vis[r];
  }
  for (int r = vis_begin + n_vis; r < n_tokens; ++r) rows[out++] = r;
  return absl::OkStatus();
}

absl::Status GatherKeptRows(const void* src, int n_tokens, size_t row_bytes, int vis_begin,
                            int n_vis, const int* kept_vis, int n_kept, void* dst) {
  if (src == nullptr || dst == nullptr) {
    return absl::InvalidArgumentError("GatherKeptRows: null pointer");
  }
  const int n_out = n_tokens - n_vis + n_kept;
  std::vector<int> rows(static_cast<size_t>(std::max(n_out, 0)));
  absl::Status s = SequenceKeepRows(n_tokens, vis_begin, n_vis, kept_vis, n_kept, rows.data());
  if (!s.ok()) return s;
  const auto* a = static_cast<const unsigned char*>(src);
  const auto* b = static_cast<const unsigned char*>(dst);
  if (a < b + static_cast<size_t>(n_out) * row_bytes &&
      b < a + static_cast<size_t>(n_tokens) * row_bytes) {
    return absl::InvalidArgumentError("GatherKeptRows: dst overlaps src");
  }
  return GatherRows(src, 1, n_tokens, row_bytes, rows.data(), n_out, dst);
}

}  // namespace hap::kernels
