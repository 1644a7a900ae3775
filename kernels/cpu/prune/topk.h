// Stable top-k selection of visual tokens: keep the k largest scores, ties broken towards the
// lower index, and return the kept indices in ascending (original sequence) order.
#pragma once

#include "absl/status/status.h"

namespace hap::kernels {

//   scores: F32 [n]
//   kept:   I32 [k], strictly ascending indices into [0, n)
// Order used: score descending, then index ascending. InvalidArgument on null pointers, n ≤ 0,
// k outside [0, n], or a NaN score (a NaN has no rank).
absl::Status StableTopK(const float* scores, int n, int k, int* kept);

}  // namespace hap::kernels
