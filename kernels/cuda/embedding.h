// Token embedding lookup on the GPU: rows of an F32, BF16 or F16 table (as stored) gathered
// and widened to F32, as the CPU model does with ConvertToF32 (runtime/model/llama.cc).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// out[r, :] = table[ids[r], :] for table [vocab, d] of `type`; ids int32 [n] in [0, vocab)
// (checked by the caller: the kernel does not read the vocabulary size). Device pointers.
KernelStatus Embedding(const void* table, ElemType type, const int32_t* ids, int n, int d,
                       float* out, Stream stream);

}  // namespace hap::cuda
