// Device memory on a GPU: the CUDA runtime's calls, errors as KernelStatus values
// (kernels/cuda/device_memory.h).
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/op_profile.h"

namespace hap::cuda {
namespace {

// Every live DeviceAlloc allocation by address: what DeviceBytesInUse sums, and the fast answer
// of IsDeviceRange (a lookup here instead of two cudaPointerGetAttributes calls, which the
// backend would otherwise make for every operand of every op).
std::mutex g_mu;
std::map<const char*, size_t>& Sizes() {
  static auto* sizes = new std::map<const char*, size_t>();
  return *sizes;
}
std::atomic<int64_t> g_in_use{0};

KernelStatus FromCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return KernelStatus::Ok();
  std::string message = std::string(what) + ": " + cudaGetErrorString(e);
  if (e == cudaErrorMemoryAllocation) return KernelStatus::OutOfMemory(std::move(message));
  return KernelStatus::Error(std::move(message));
}

}  // namespace

KernelStatus DeviceAlloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  KernelStatus s = FromCuda(cudaMalloc(ptr, bytes == 0 ? 1 : bytes), "cudaMalloc");
  if (!s.ok) return s;
  std::lock_guard<std::mutex> lock(g_mu);
  Sizes()[static_cast<const char*>(*ptr)] = bytes;
  g_in_use += static_cast<int64_t>(bytes);
  return s;
}

KernelStatus DeviceFree(void* ptr) {
  if (ptr == nullptr) return KernelStatus::Ok();
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = Sizes().find(static_cast<const char*>(ptr));
    if (it != Sizes().end()) {
      g_in_use -= static_cast<int64_t>(it->second);
      Sizes().erase(it);
    }
  }
  return FromCuda(cudaFree(ptr), "cudaFree");
}

KernelStatus HostAlloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  return FromCuda(cudaMallocHost(ptr, bytes == 0 ? 1 : bytes), "cudaMallocHost");
}

KernelStatus HostFree(void* ptr) {
  if (ptr == nullptr) return KernelStatus::Ok();
  return FromCuda(cudaFreeHost(ptr), "cudaFreeHost");
}

KernelStatus Copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream stream) {
  if (bytes == 0) return KernelStatus::Ok();
  const cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                             : cudaMemcpyDeviceToDevice;
  auto s = static_cast<cudaStream_t>(stream);
  profile::Begin(stream);
  KernelStatus st = FromCuda(cudaMemcpyAsync(dst, src, bytes, k, s), "cudaMemcpyAsync");
  profile::End(stream, kind == CopyKind::kHostToDevice   ? "copy host to device"
                       : kind == CopyKind::kDeviceToHost ? "copy device to host"
                                                         : "copy device to device");
  if (!st.ok || kind != CopyKind::kDeviceToHost) return st;
  return FromCuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

KernelStatus CopyToHostAsync(void* dst, const void* src, size_t bytes, Stream stream) {
  if (bytes == 0) return KernelStatus::Ok();
  profile::Begin(stream);
  KernelStatus st = FromCuda(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)),
      "cudaMemcpyAsync");
  profile::End(stream, "copy device to host");
  return st;
}

KernelStatus Fill(void* dst, unsigned char value, size_t bytes, Stream stream) {
  profile::Begin(stream);
  KernelStatus st = FromCuda(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)),
                             "cudaMemsetAsync");
  profile::End(stream, "fill");
  return st;
}

KernelStatus Synchronize(Stream stream) {
  return FromCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
                  "cudaStreamSynchronize");
}

KernelStatus CreateStream(Stream* stream) {
  cudaStream_t s = nullptr;
  KernelStatus st = FromCuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                             "cudaStreamCreate");
  *stream = s;
  return st;
}

KernelStatus DestroyStream(Stream stream) {
  return FromCuda(cudaStreamDestroy(static_cast<cudaStream_t>(stream)), "cudaStreamDestroy");
}

int64_t DeviceBytesInUse() { return g_in_use.load(); }

namespace {

// The properties of the device the calling thread computes on.
KernelStatus CurrentDevice(cudaDeviceProp* prop) {
  int device = 0;
  KernelStatus st = FromCuda(cudaGetDevice(&device), "cudaGetDevice");
  if (!st.ok) return st;
  return FromCuda(cudaGetDeviceProperties(prop, device), "cudaGetDeviceProperties");
}

}  // namespace

KernelStatus DeviceIdentity(std::string* identity) {
  cudaDeviceProp prop;
  KernelStatus st = CurrentDevice(&prop);
  if (!st.ok) return st;
  static const char* digits = "0123456789abcdef";
  *identity = "GPU-";
  for (char c : prop.uuid.bytes) {
    identity->push_back(digits[static_cast<unsigned char>(c) >> 4]);
    identity->push_back(digits[static_cast<unsigned char>(c) & 15]);
  }
  return st;
}

KernelStatus DeviceDescription(char* name, size_t name_bytes, int64_t* total_bytes) {
  cudaDeviceProp prop;
  KernelStatus st = CurrentDevice(&prop);
  if (!st.ok) return st;
  if (name_bytes > 0) {
    std::strncpy(name, prop.name, name_bytes - 1);
    name[name_bytes - 1] = '\0';
  }
  *total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  return st;
}

KernelStatus DeviceCount(int* count, std::string* why_none) {
  *count = 0;
  why_none->clear();
  const cudaError_t e = cudaGetDeviceCount(count);
  if (e == cudaSuccess && *count > 0) return KernelStatus::Ok();
  if (e == cudaSuccess || e == cudaErrorNoDevice) {
    *count = 0;
    *why_none = std::string("cudaGetDeviceCount: ") +
                (e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    return KernelStatus::Ok();
  }
  (void)cudaGetLastError();
  *count = 0;
  // Without the driver library the runtime reports an insufficient driver; with it, that error
  // means a driver too old for this runtime on a machine that has a GPU, which is a failure.
  if (e == cudaErrorInsufficientDriver) {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == nullptr) {
      *why_none = std::string("no NVIDIA driver (libcuda.so.1 not found; cudaGetDeviceCount: ") +
                  cudaGetErrorString(e) + ")";
      return KernelStatus::Ok();
    }
    dlclose(driver);
  }
  return FromCuda(e, "cudaGetDeviceCount");
}

namespace {

bool IsDevicePointer(const void* ptr) {
  cudaPointerAttributes attributes;
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    // An unknown pointer is an error on older runtimes; it must not linger for the next call.
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

}  // namespace

bool IsPinnedHostRange(const void* ptr, size_t bytes) {
  if (ptr == nullptr) return false;
  const char* last = static_cast<const char*>(ptr) + (bytes > 0 ? bytes - 1 : 0);
  for (const void* p : {ptr, static_cast<const void*>(last)}) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();  // clear the error a pageable pointer leaves on older runtimes
      return false;
    }
    if (a.type != cudaMemoryTypeHost) return false;
  }
  return true;
}

bool IsDeviceRange(const void* ptr, size_t bytes) {
  if (ptr == nullptr) return false;
  const char* first = static_cast<const char*>(ptr);
  {
    // Inside one of this process's allocations: the allocation at or below ptr holds the range.
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = Sizes().upper_bound(first);
    if (it != Sizes().begin()) {
      --it;
      const size_t offset = static_cast<size_t>(first - it->first);
      if (offset < std::max<size_t>(it->second, 1) && bytes <= it->second - offset) return true;
    }
  }
  // Memory from elsewhere (another allocator, an IPC mapping): the runtime's answer.
  return IsDevicePointer(first) && (bytes <= 1 || IsDevicePointer(first + bytes - 1));
}

}  // namespace hap::cuda
