// VisionZip's contextual tokens on the GPU (kernels/cpu/prune/visionzip_merge.h, docs/design.md §4):
// head-mean unit keys, each source assigned to the most similar target, targets' hidden rows
// plus the mean of their sources'.
#pragma once

#include <cstddef>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"
#include "kernels/op_args.h"

namespace hap::cuda {

// Device bytes of the workspace VisionZipMerge needs: F64 unit keys [n_targets + n_sources,
// head_dim] and the I32 assignment [n_sources].
size_t VisionZipMergeWorkspaceBytes(int n_targets, int n_sources, int head_dim);

// The contract of kernels::VisionZipMerge with every pointer in device memory (targets, sources
// and merged_count included) and `workspace` (device, VisionZipMergeWorkspaceBytes) as scratch.
// Three launches, each doing the reference's arithmetic in the reference's order, so that the
// emulation matches it bit for bit (on a GPU, nvcc's fused multiply-adds move the F64 key norms
// and similarities by an ulp):
//  1. one block per key (targets, then sources): each thread sums its components over the heads
//     (F64), thread 0 takes the norm in component order, every thread divides;
//  2. one thread per source: F64 dot products with each target's key in component order, the
//     first largest wins;
//  3. one thread per (target, output column): the column's F64 sum over the sources assigned to
//     the target, in source order, its mean added to the target's hidden value.
// The indices cannot be checked from the host here: the backend checks its host copies before it
// uploads them. An index outside [0, n_tokens) is never read; its key is NaN (a source with a NaN
// key goes to target 0) and the rows it would feed are NaN.
// Errors: null pointers, non-positive sizes (n_sources may be 0).
KernelStatus VisionZipMerge(const VisionZipMergeArgs& args, void* workspace, Stream stream);

}  // namespace hap::cuda
