// Dense matrix products on the CPU (OpenBLAS sgemm/sgemv).
#pragma once

#include "absl/status/status.h"
#include "base/tensor.h"

namespace hap::cpu {

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]); w in the Hugging Face Linear layout [out, in].
// bias may be null. y must not alias x.
absl::Status Linear(const float* x, const float* w, const float* bias, float* y, int m, int k,
                    int n);

// The same with w a host weight view [n, k] in F32, BF16 or F16 (F32 accumulation); k and n
// come from w.shape. Weights are read as stored. NarrowRowsTimesX (split over the default pool;
// each output computed the same way whatever m: batch-invariant) takes up to kGemvRowsF32 rows
// of F32 weights and up to kGemvRowsNarrow rows of BF16/F16 weights (where it beats widening the
// weight for sgemm: pruned prefills and decode batches); more rows use sgemm, on BF16/F16 over
// weight tiles widened into a thread-local F32 buffer.
inline constexpr int kGemvRowsF32 = 16;
inline constexpr int kGemvRowsNarrow = 128;
absl::Status Linear(const float* x, const TensorView& w, const float* bias, float* y, int m);

// Sizes the CPU compute of this process: the default pool (the kernels' own threads) and
// OpenBLAS's threads both get n_threads (<= 0: all cores), so the two never run more threads
// than that between them (they take turns within one op sequence). Call before first use.
void SetComputeThreads(int n_threads);

// Plain reference of Linear (triple loop, double accumulation) for tests.
void LinearReference(const float* x, const float* w, const float* bias, float* y, int m, int k,
                     int n);

}  // namespace hap::cpu
