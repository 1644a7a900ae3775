// Dense matrix products on the CPU (own kernels; OpenBLAS sgemm/sgemv per pool thread).
#pragma once

#include "absl/status/status.h"
#include "base/tensor.h"
#include "base/thread_pool.h"
#include "kernels/op_args.h"

namespace hap::cpu {

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]); w in the Hugging Face Linear layout [out, in].
// bias may be null. y must not alias x.
absl::Status Linear(const float* x, const float* w, const float* bias, float* y, int m, int k,
                    int n);

// The same with w a host weight view [n, k] in F32, BF16 or F16 (F32 accumulation); k and n
// come from w.shape. Weights are read as stored. With BF16 weights on a CPU with AVX512-BF16,
// x is rounded to BF16 on every path (BF16 dot products). NarrowRowsTimesX (split over the default pool;
// each output computed the same way whatever m: batch-invariant) takes up to kGemvRowsF32 rows
// of F32 weights and up to kGemvRowsNarrow rows of BF16/F16 weights (where it beats widening the
// weight for sgemm: pruned prefills and decode batches). More rows: BF16 weights go to
// Bf16Gemm where the CPU has AVX512-BF16 (x rounded to BF16, F32 accumulation, about twice
// sgemm's rate), otherwise to sgemm over weight tiles widened into a thread-local F32 buffer,
// as F16 weights do; F32 weights go to sgemm directly. Rows of one sequence
// (LinearRows::kOneSequence) on BF16 weights take Bf16Gemm from kBf16GemmRows rows on, where
// it is several times the narrow kernel's rate; independent rows keep the narrow kernel up to
// kGemvRowsNarrow, so a decode step's rows stay batch-invariant.
inline constexpr int kGemvRowsF32 = 16;
inline constexpr int kGemvRowsNarrow = 128;
inline constexpr int kBf16GemmRows = 16;
absl::Status Linear(const float* x, const TensorView& w, const float* bias, float* y, int m,
                    LinearRows rows = LinearRows::kIndependent);

// Sizes the CPU compute of this process: the default pool gets n_threads (<= 0: all cores) and
// OpenBLAS one thread (the kernels call it from each pool thread on their own share of the
// work), so nothing runs more threads than n_threads. Call before first use.
// spin_us: how long the pool's hand-overs spin before sleeping (ThreadPool).
void SetComputeThreads(int n_threads, int spin_us = ThreadPool::kDefaultSpinUs);

// Plain reference of Linear (triple loop, double accumulation) for tests.
void LinearReference(const float* x, const float* w, const float* bias, float* y, int m, int k,
                     int n);

}  // namespace hap::cpu
