// Wide products with BF16 weights on the CPU's BF16 dot-product instruction (AVX512-BF16's
// VDPBF16PS: per F32 lane, two BF16 products added to the accumulator), twice the multiply rate
// of F32 FMAs on the same core. The activations are rounded to BF16 (nearest even) for the
// product, as BF16 inference does elsewhere (llama.cpp's BF16 path, PyTorch's CPU autocast);
// accumulation stays F32. Used for prefill-sized products (see Linear); each output element is
// summed in one fixed order over k whatever m, n or the thread count.
#pragma once

#include <cstdint>

namespace hap::cpu {

// Whether this CPU runs Bf16Gemm (AVX512-F, -BW and -BF16).
bool HasBf16DotProduct();

// y[i, j] = Σ_t bf16(x[i, t]) · w[j, t] for i < m, j < n; x F32 [m, k] row-major, w BF16 bits
// [n, k] row-major (read unaligned, as mapped), y F32 [m, n]. Split over the default pool; the
// caller checks HasBf16DotProduct() first.
void Bf16Gemm(const float* x, int m, int k, const uint16_t* w, int n, float* y);

// The same product computed plainly (x rounded to BF16, double accumulation), for tests.
void Bf16GemmReference(const float* x, int m, int k, const uint16_t* w, int n, float* y);

}  // namespace hap::cpu
