// CPU reference of StableTopK: partial selection on (score desc, index asc), then sort indices.
#include "kernels/cpu/prune/topk.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"

namespace hap::kernels {

absl::Status StableTopK(const float* scores, int n, int k, int* kept) {
  if (scores == nullptr || (kept == nullptr && k > 0) || n <= 0 || k < 0 || k > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("StableTopK: bad arguments (n=", n, " k=", k, ")"));
  }
  for (int i = 0; i < n; ++i) {
    if (std::isnan(scores[i])) {
      return absl::InvalidArgumentError(absl::StrCat("StableTopK: score ", i, " is NaN"));
    }
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  // A strict total order (indices are distinct), so the selected set is unique.
  auto before = [scores](int a, int b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  std::nth_element(order.begin(), order.begin() + k, order.end(), before);
  std::sort(order.begin(), order.begin() + k);
  std::copy(order.begin(), order.begin() + k, kept);
  return absl::OkStatus();
}

}  // namespace hap::kernels
