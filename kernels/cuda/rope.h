// Rotary position embedding on the GPU, Hugging Face LLaMA layout (rotate_half: pairs
// (i, i + head_dim/2)), at each row's original position id (kernels/cpu/rope.h). Angles are
// computed in F64 as the CPU does, so both backends rotate by the same F32 cos/sin.
#pragma once

#include <cstdint>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// x F32 [rows, n_heads * head_dim], rotated in place; positions int32 [rows]. Device pointers.
KernelStatus Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
                  float theta, Stream stream);

}  // namespace hap::cuda
