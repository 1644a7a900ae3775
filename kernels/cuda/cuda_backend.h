// The CUDA backend: kernels/backend.h on the kernels of this directory, cuBLAS products and
// device memory. Each calling thread gets its own stream, product context and upload scratch,
// so the engine's threads never wait on each other's work. Built twice (kernels/cuda/
// CMakeLists.txt): for a GPU, and on the SIMT emulation, where every op also checks that the
// pointers it is given lie in device allocations — the check that model code hands the
// backend device memory, never a host buffer.
#pragma once

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace hap {

// The process's CUDA backend. FailedPrecondition when the CUDA runtime finds no usable device.
absl::StatusOr<const Backend*> GetCudaBackend();

}  // namespace hap
