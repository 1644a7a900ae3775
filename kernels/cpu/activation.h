// Elementwise activations used by CLIP, the projector and the LLaMA MLP.
#pragma once

#include <cstdint>

namespace hap::cpu {

// x ← x · sigmoid(1.702 x)  (CLIP's quick_gelu), in place over n elements.
void QuickGelu(float* x, int64_t n);
// x ← 0.5 x (1 + erf(x / √2))  (exact GELU).
void Gelu(float* x, int64_t n);
// x ← 0.5 x (1 + tanh(√(2/π)(x + 0.044715 x³)))  (gelu_pytorch_tanh).
void GeluTanh(float* x, int64_t n);
// gate ← silu(gate) · up  (SwiGLU), over n elements.
void SiluMul(float* gate, const float* up, int64_t n);
// y ← y + x over n elements.
void AddInPlace(float* y, const float* x, int64_t n);

}  // namespace hap::cpu
