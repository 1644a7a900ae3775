// Rotary position embedding on the GPU, Hugging Face LLaMA layout (rotate_half: pairs
// (i, i + head_dim/2)), at each row's original position id (kernels/cpu/rope.h). Angles are
// computed in F64 as the CPU does, so both backends rotate by the same F32 cos/sin.
#pragma once

#include <cstdint>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"
#include "kernels/op_args.h"

namespace hap::cuda {

// x F32 [rows, n_heads * head_dim], rotated in place; positions int32 [rows]. Device pointers.
KernelStatus Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
                  float theta, Stream stream);
// Rope of x [rows, n_heads · head_dim] and of x2 [rows, n_heads2 · head_dim] at the same
// positions, in one launch (a layer's q and k; each row's angles computed once): bit for bit the
// two Rope calls. Errors as Rope's, and for a null, empty or identical x2.
KernelStatus RopePair(float* x, int n_heads, float* x2, int n_heads2, const int32_t* positions,
                      int rows, int head_dim, float theta, Stream stream);
// cos_table and sin_table F32 [positions, head_dim / 2] (device): entry [p, i] the cos and sin
// of pair i's angle at position p, exactly the values Rope rotates by at p. FlashAttention's RoPE
// on load (attention.h FlashRopeArgs) reads them rather than computing each angle in F64.
KernelStatus RopeTable(float* cos_table, float* sin_table, int positions, int head_dim, float theta,
                       Stream stream);
// op_args.h RopeAxesArgs (device pointers): bit for bit kernels/cpu/rope.h RopeAxes, each pair's
// angle from its section's axis in F64.
KernelStatus RopeAxes(const RopeAxesArgs& args, Stream stream);

}  // namespace hap::cuda
