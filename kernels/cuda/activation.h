// Elementwise activations on the GPU (kernels/cpu/activation.h): CLIP's quick_gelu, exact GELU,
// gelu_pytorch_tanh, and the LLaMA MLP's SiLU(gate)·up. In place over n F32 elements.
#pragma once

#include <cstdint>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

enum class ActivationKind { kQuickGelu, kGelu, kGeluTanh };

// x ← act(x). Device pointer.
KernelStatus Activate(ActivationKind kind, float* x, int64_t n, Stream stream);
// quick_gelu in place that also writes the results rounded to `narrow` (BF16 or F16) into
// `rounded` [n]: the fc2 product's input on narrow weights. With `bias` (F32 [cols], x viewed as
// [n / cols, cols]) x + bias goes through the activation: the fc1 product's bias, left to it.
KernelStatus QuickGeluRounded(float* x, int64_t n, ElemType narrow, void* rounded, Stream stream,
                              const float* bias = nullptr, int cols = 0);
// gate ← silu(gate) · up. Device pointers.
KernelStatus SiluMul(float* gate, const float* up, int64_t n, Stream stream);
// SiluMul that also writes the results rounded to `narrow` (BF16 or F16) into `rounded` [n]:
// what the down product on narrow weights reads, with no launch of its own to round them.
KernelStatus SiluMulRounded(float* gate, const float* up, int64_t n, ElemType narrow, void* rounded,
                            Stream stream);

}  // namespace hap::cuda
