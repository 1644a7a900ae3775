// Rotary position embedding in the Hugging Face LLaMA layout (rotate_half: pairs (i, i+hd/2)).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/op_args.h"

namespace hap::cpu {

// x F32 [rows, n_heads * head_dim], rotated in place; row r uses position positions[r].
// θ_i = position · theta^(−2i/head_dim), i < head_dim/2 (angles in double, as the reference).
absl::Status Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
                  float theta);

// op_args.h RopeAxesArgs; the angle of pair i is position(axis of i) · inv_freq(i) in F64.
// With sections {head_dim/2, 0, 0} it is Rope bit for bit. InvalidArgument for sections that
// do not sum to head_dim/2, negative sections, an odd head_dim.
absl::Status RopeAxes(const RopeAxesArgs& args);

}  // namespace hap::cpu
