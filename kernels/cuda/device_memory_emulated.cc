// Device memory on the SIMT emulation: host allocations, tracked so that IsDeviceRange can tell
// a device pointer from a host one (kernels/cuda/device_memory.h).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/emulated_memory.h"
#include "kernels/cuda/emulation_counts.h"
#include "kernels/cuda/graph.h"

namespace hap::cuda {
namespace {

std::mutex g_mu;
std::map<uintptr_t, size_t>& Allocations() {
  static auto* allocations = new std::map<uintptr_t, size_t>();
  return *allocations;
}
std::atomic<int64_t> g_in_use{0};
std::atomic<int64_t> g_to_host{0};
std::atomic<int64_t> g_to_host_bytes{0};
std::atomic<int64_t> g_allocations{0};
std::atomic<int64_t> g_frees{0};
std::atomic<int64_t> g_to_device{0};
std::atomic<int64_t> g_to_device_staged{0};
// Page-locked host allocations (HostAlloc), by address.
std::map<uintptr_t, size_t>& HostAllocations() {
  static auto* allocations = new std::map<uintptr_t, size_t>();
  return *allocations;
}

// Whether [ptr, ptr + bytes) lies in one allocation of `allocations`.
bool InOneAllocation(const std::map<uintptr_t, size_t>& allocations, const void* ptr,
                     size_t bytes) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return false;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second;
}

}  // namespace

int64_t emulation::DeviceAllocations() { return g_allocations.load(); }
int64_t emulation::DeviceFrees() { return g_frees.load(); }
int64_t emulation::HostToDeviceCopies() { return g_to_device.load(); }
int64_t emulation::StagedHostToDeviceCopies() { return g_to_device_staged.load(); }
int64_t emulation::DeviceToHostCopies() { return g_to_host.load(); }
int64_t emulation::DeviceToHostBytes() { return g_to_host_bytes.load(); }

KernelStatus HostAlloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + (bytes == 0 ? 256 : 0));
  if (p == nullptr) return KernelStatus::OutOfMemory("HostAlloc: out of memory");
  std::lock_guard<std::mutex> lock(g_mu);
  HostAllocations()[reinterpret_cast<uintptr_t>(p)] = bytes;
  *ptr = p;
  return KernelStatus::Ok();
}

KernelStatus HostFree(void* ptr) {
  if (ptr == nullptr) return KernelStatus::Ok();
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = HostAllocations().find(reinterpret_cast<uintptr_t>(ptr));
  if (it == HostAllocations().end()) return KernelStatus::Error("HostFree: not a HostAlloc block");
  HostAllocations().erase(it);
  std::free(ptr);
  return KernelStatus::Ok();
}

KernelStatus DeviceAlloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + (bytes == 0 ? 256 : 0));
  if (p == nullptr) return KernelStatus::OutOfMemory("DeviceAlloc: out of memory");
  ++g_allocations;
  std::lock_guard<std::mutex> lock(g_mu);
  Allocations()[reinterpret_cast<uintptr_t>(p)] = bytes;
  g_in_use += static_cast<int64_t>(bytes);
  *ptr = p;
  return KernelStatus::Ok();
}

KernelStatus DeviceFree(void* ptr) {
  if (ptr == nullptr) return KernelStatus::Ok();
  ++g_frees;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Allocations().find(reinterpret_cast<uintptr_t>(ptr));
  if (it == Allocations().end()) return KernelStatus::Error("DeviceFree: not a device allocation");
  g_in_use -= static_cast<int64_t>(it->second);
  Allocations().erase(it);
  std::free(ptr);
  return KernelStatus::Ok();
}

void emulation::AddDeviceRange(void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  Allocations()[reinterpret_cast<uintptr_t>(ptr)] = bytes;
}

void emulation::RemoveDeviceRange(void* ptr) {
  std::lock_guard<std::mutex> lock(g_mu);
  Allocations().erase(reinterpret_cast<uintptr_t>(ptr));
}

KernelStatus DeviceIdentity(std::string* identity) {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string boot;
  if (!std::getline(f, boot) || boot.empty()) {
    return KernelStatus::Error("DeviceIdentity: cannot read the machine's boot id");
  }
  *identity = "emulated-" + boot;
  return KernelStatus::Ok();
}

bool IsPinnedHostRange(const void* ptr, size_t bytes) {
  return InOneAllocation(HostAllocations(), ptr, bytes);
}

bool IsDeviceRange(const void* ptr, size_t bytes) {
  return InOneAllocation(Allocations(), ptr, bytes);
}

namespace {

// A copy now (Copy, or a graph's replay of it).
KernelStatus CopyNow(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (kind == CopyKind::kDeviceToHost) {
    ++g_to_host;
    g_to_host_bytes += static_cast<int64_t>(bytes);
  }
  if (kind == CopyKind::kHostToDevice) {
    ++g_to_device;
    if (!InOneAllocation(HostAllocations(), src, bytes)) ++g_to_device_staged;
  }
  const bool dst_device = kind != CopyKind::kDeviceToHost;
  const bool src_device = kind != CopyKind::kHostToDevice;
  if (dst_device && !IsDeviceRange(dst, bytes)) {
    return KernelStatus::Error("Copy: destination is not device memory");
  }
  if (src_device && !IsDeviceRange(src, bytes)) {
    return KernelStatus::Error("Copy: source is not device memory");
  }
  std::memmove(dst, src, bytes);
  return KernelStatus::Ok();
}

// The calling thread's device→host copies issued without a wait (CopyToHostAsync): the bytes
// as they were when issued, written to their destinations at the thread's next synchronisation.
struct PendingCopy {
  void* dst;
  std::vector<char> bytes;
};
thread_local std::vector<PendingCopy> t_pending;

void LandPendingCopies() {
  for (PendingCopy& p : t_pending) std::memcpy(p.dst, p.bytes.data(), p.bytes.size());
  t_pending.clear();
}

}  // namespace

KernelStatus CopyToHostAsync(void* dst, const void* src, size_t bytes, Stream) {
  if (bytes == 0) return KernelStatus::Ok();
  if (Capturing()) return KernelStatus::Error("CopyToHostAsync: while capturing a graph");
  if (!IsDeviceRange(src, bytes)) return KernelStatus::Error("Copy: source is not device memory");
  if (!InOneAllocation(HostAllocations(), dst, bytes)) {
    return KernelStatus::Error("CopyToHostAsync: the destination is not HostAlloc memory");
  }
  ++g_to_host;
  g_to_host_bytes += static_cast<int64_t>(bytes);
  const char* from = static_cast<const char*>(src);
  t_pending.push_back(PendingCopy{dst, std::vector<char>(from, from + bytes)});
  return KernelStatus::Ok();
}

KernelStatus Copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream) {
  if (bytes == 0) return KernelStatus::Ok();
  if (kind == CopyKind::kDeviceToHost) LandPendingCopies();  // it waits for the stream
  if (Capturing()) {
    // A copy to the host waits for the device: not in a graph (nor is cudaMemcpy to the host).
    if (kind == CopyKind::kDeviceToHost) {
      return KernelStatus::Error("Copy: a copy to the host while capturing a graph");
    }
    emulation::Record([=] { return CopyNow(dst, src, bytes, kind); });
    return KernelStatus::Ok();
  }
  return CopyNow(dst, src, bytes, kind);
}

KernelStatus Fill(void* dst, unsigned char value, size_t bytes, Stream) {
  if (bytes == 0) return KernelStatus::Ok();
  const std::function<KernelStatus()> fill = [=] {
    if (!IsDeviceRange(dst, bytes)) return KernelStatus::Error("Fill: not device memory");
    std::memset(dst, value, bytes);
    return KernelStatus::Ok();
  };
  if (emulation::Record(fill)) return KernelStatus::Ok();
  return fill();
}

KernelStatus Synchronize(Stream) {
  LandPendingCopies();
  return KernelStatus::Ok();
}
KernelStatus CreateStream(Stream* stream) {
  *stream = nullptr;
  return KernelStatus::Ok();
}
KernelStatus DestroyStream(Stream) { return KernelStatus::Ok(); }
int64_t DeviceBytesInUse() { return g_in_use.load(); }

KernelStatus DeviceDescription(char* name, size_t name_bytes, int64_t* total_bytes) {
  if (name_bytes > 0) {
    std::strncpy(name, "emulated", name_bytes - 1);
    name[name_bytes - 1] = '\0';
  }
  *total_bytes = 0;
  return KernelStatus::Ok();
}

KernelStatus DeviceCount(int* count, std::string* why_none) {
  *count = 1;
  why_none->clear();
  return KernelStatus::Ok();
}

}  // namespace hap::cuda
