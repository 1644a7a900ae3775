// CUDA IPC on a GPU (kernels/cuda/ipc.h): a block of the block cache is the base of its own
// cudaMalloc, which is what cudaIpcGetMemHandle takes; the importing process maps it with
// cudaIpcOpenMemHandle and unmaps it with cudaIpcCloseMemHandle.
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "kernels/cuda/block_cache.h"
#include "kernels/cuda/ipc.h"

namespace hap::cuda {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes);

KernelStatus FromCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return KernelStatus::Ok();
  return KernelStatus::Error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

KernelStatus AllocShareable(void** ptr, size_t bytes) {
  return BlockCache::Get().Allocate(ptr, bytes);
}

KernelStatus FreeShareable(void* ptr) { return BlockCache::Get().Free(ptr); }

// The block cache's blocks are all shareable; the backend frees them through it either way.
bool IsShareable(const void*) { return false; }

KernelStatus IpcExport(const void* ptr, std::string* handle) {
  cudaIpcMemHandle_t h;
  KernelStatus s = FromCuda(cudaIpcGetMemHandle(&h, const_cast<void*>(ptr)), "cudaIpcGetMemHandle");
  if (!s.ok) return s;
  handle->assign(reinterpret_cast<const char*>(&h), sizeof h);
  return s;
}

KernelStatus IpcOpen(const std::string& handle, size_t bytes, void** ptr) {
  *ptr = nullptr;
  if (handle.size() != kIpcHandleBytes) {
    return KernelStatus::Error("IpcOpen: a handle of " + std::to_string(handle.size()) +
                               " bytes (expected " + std::to_string(kIpcHandleBytes) + ")");
  }
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof h);
  KernelStatus s = FromCuda(cudaIpcOpenMemHandle(ptr, h, cudaIpcMemLazyEnablePeerAccess),
                            "cudaIpcOpenMemHandle");
  if (!s.ok) return s;
  // The mapping covers the exporter's whole allocation, a block at least as large as it asked
  // for; a handle of a smaller block than the caller needs is a mismatch the caller checks
  // against what the exporter declared.
  (void)bytes;
  return s;
}

KernelStatus IpcClose(void* ptr) {
  return FromCuda(cudaIpcCloseMemHandle(ptr), "cudaIpcCloseMemHandle");
}

}  // namespace hap::cuda
