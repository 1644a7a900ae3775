// Device memory shared between processes on one GPU (CUDA IPC): what hands a KV cache from the
// prefill process to the decode process on the same node without a copy through the host. The
// exporting process allocates the memory with AllocShareable and keeps it until the importing one
// has closed its mapping. On a GPU: cudaIpcGetMemHandle / cudaIpcOpenMemHandle on a block of the
// block cache (each block is the base of its own cudaMalloc, as a handle requires; ipc_cuda.cc).
// On the emulation (ipc_emulated.cc) the memory is a shared-memory file (memfd) mapped as device
// memory, and the importing process maps the same file through /proc/<pid>/fd: the same bytes, as
// on a GPU, not a copy.
#pragma once

#include <cstddef>
#include <string>

#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// A handle's bytes: cudaIpcMemHandle_t's 64 on a GPU.
inline constexpr size_t kIpcHandleBytes = 64;

// *ptr = `bytes` of device memory that IpcExport can share; freed with FreeShareable.
KernelStatus AllocShareable(void** ptr, size_t bytes);
KernelStatus FreeShareable(void* ptr);
// Whether `ptr` is what AllocShareable gave (and not yet freed).
bool IsShareable(const void* ptr);
// *handle = kIpcHandleBytes bytes another process on the same device opens with IpcOpen.
KernelStatus IpcExport(const void* ptr, std::string* handle);
// Maps the memory of `handle` (exported by another process) as device memory of at least
// `bytes`; an error when the handle is malformed, its memory is gone or smaller than `bytes`.
KernelStatus IpcOpen(const std::string& handle, size_t bytes, void** ptr);
// Ends what IpcOpen mapped (after the work that reads it is done: the caller synchronises).
KernelStatus IpcClose(void* ptr);

}  // namespace hap::cuda
