// Matrix products with weights as stored in the checkpoint (F32, BF16 or F16) and F32
// accumulation. F32 and F16 weights (and BF16 ones on CPUs without AVX512-BF16) are widened
// exactly against F32 activations, so the result is the F32 product of the same values in
// another summation order. BF16 weights on a CPU with AVX512-BF16 multiply x rounded to BF16
// with the BF16 dot-product instruction (twice the FMA rate, no widening), as BF16 inference
// does elsewhere. Each output element is computed the same way whatever m and whichever rows
// run together, so a sequence decoded in a batch gets exactly the logits it gets alone.
#pragma once

#include <cstdint>

#include "base/dtype.h"

namespace hap::cpu {

// y[i, j] = Σ_t x[i, t] · w[j, t] for i < m and j in [j_begin, j_end); x F32 [m, k] row-major,
// w [n, k] of `dtype`, y with row stride ldy. Reads each weight row once per
// block of x rows, so small m (decode steps, batched or not) is bound by weight bytes.
// Uses AVX-512 where the CPU has it, portable code elsewhere.
void NarrowRowsTimesX(const float* x, int m, int k, const void* w, DType dtype, int64_t j_begin,
                      int64_t j_end, float* y, int64_t ldy);

// Widens weight rows [j_begin, j_end) of w [n, k] into dst F32 [j_end - j_begin, k].
void WidenRows(const void* w, DType dtype, int k, int64_t j_begin, int64_t j_end, float* dst);

}  // namespace hap::cpu
