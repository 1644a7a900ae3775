// Types the kernels' host entry points share with code that is not compiled by nvcc.
#pragma once

namespace hap::cuda {

// A stream: a cudaStream_t on a GPU (nullptr = the default stream); the emulation runs every
// launch to completion before returning and ignores it.
using Stream = void*;

}  // namespace hap::cuda

namespace hap::cuda {

// Element type of a weight or cache tensor as the kernels see it (base/dtype.h's DType, which
// nvcc does not compile: it pulls in Abseil).
enum class ElemType { kF32, kF16, kBF16 };

}  // namespace hap::cuda
