// Stable top-k on the GPU (kernels/cpu/prune/topk.h): keep the k largest of n scores, ties to the
// lower index, kept indices ascending — the same set as kernels::StableTopK.
#pragma once

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// One block of up to 1024 threads, thread t owning the contiguous slice [t·s, (t+1)·s) of the
// scores (s = ceil(n / threads)):
//  1. radix select over an order-preserving 32-bit key of each score (−0 and +0 one key): four
//     8-bit passes, each a shared-memory histogram of the keys still matching the chosen prefix,
//     find the key T of the k-th largest score and how many scores equal to T are kept, e;
//  2. one block-wide exclusive scan of each slice's (count > T, count == T) gives every slice its
//     output offset; a slice keeps its scores above T and, in index order, the first of its
//     scores equal to T while fewer than e of those precede it.
// The output is in index order by construction; no sort. Up to 1024 scores (HAP's 576 visual
// tokens) a single pass does it instead: thread i counts the scores ranked above score i (higher,
// or equal at a lower index) in shared memory, keeps i when that rank is below k, and writes it at
// the place an exclusive scan of the kept flags gives. O(n / threads + 256) per thread per pass,
// 7 passes over the scores: for n ≤ ~10k, tens of microseconds in one block.
//   scores: F32 [n] (device)   kept: I32 [k] (device), strictly ascending indices into [0, n)
// Errors: null pointers, n ≤ 0, k outside [0, n]. k = 0 launches nothing. A NaN score (no rank;
// the reference rejects it) is found on the device: kept is then all −1, which the backend, copying
// kept back to the host anyway, turns into InvalidArgument.
KernelStatus StableTopK(const float* scores, int n, int k, int* kept, Stream stream);

}  // namespace hap::cuda
