// CUDA IPC on the emulation (kernels/cuda/ipc.h): shareable device memory is a memfd mapped
// MAP_SHARED and registered as device memory; its handle names this process and the file's
// descriptor, which another process on the machine opens through /proc/<pid>/fd and maps.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "kernels/cuda/emulated_memory.h"
#include "kernels/cuda/ipc.h"

namespace hap::cuda {
namespace {

// What a handle holds, padded with zeros to kIpcHandleBytes.
struct Wire {
  char magic[8];  // "hapipc1"
  int64_t pid;
  int64_t fd;
  int64_t bytes;
};
static_assert(sizeof(Wire) <= kIpcHandleBytes);
constexpr char kMagic[8] = "hapipc1";

struct Mapping {
  int fd = -1;  // the memfd of an exported allocation; -1 for an imported mapping
  size_t bytes = 0;
};

std::mutex g_mu;
std::map<uintptr_t, Mapping>& Mappings() {
  static auto* mappings = new std::map<uintptr_t, Mapping>();
  return *mappings;
}

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

KernelStatus AllocShareable(void** ptr, size_t bytes) {
  *ptr = nullptr;
  const size_t size = bytes == 0 ? 1 : bytes;
  const int fd = memfd_create("hap-shareable-device-memory", MFD_CLOEXEC);
  if (fd < 0) return KernelStatus::Error(Errno("AllocShareable: memfd_create"));
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const std::string why = Errno("AllocShareable: ftruncate");
    close(fd);
    return KernelStatus::OutOfMemory(why);
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const std::string why = Errno("AllocShareable: mmap");
    close(fd);
    return KernelStatus::OutOfMemory(why);
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    Mappings()[reinterpret_cast<uintptr_t>(p)] = Mapping{fd, size};
  }
  emulation::AddDeviceRange(p, size);
  *ptr = p;
  return KernelStatus::Ok();
}

KernelStatus FreeShareable(void* ptr) {
  if (ptr == nullptr) return KernelStatus::Ok();
  Mapping m;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = Mappings().find(reinterpret_cast<uintptr_t>(ptr));
    if (it == Mappings().end() || it->second.fd < 0) {
      return KernelStatus::Error("FreeShareable: not an AllocShareable block");
    }
    m = it->second;
    Mappings().erase(it);
  }
  emulation::RemoveDeviceRange(ptr);
  munmap(ptr, m.bytes);
  close(m.fd);
  return KernelStatus::Ok();
}

bool IsShareable(const void* ptr) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Mappings().find(reinterpret_cast<uintptr_t>(ptr));
  return it != Mappings().end() && it->second.fd >= 0;
}

KernelStatus IpcExport(const void* ptr, std::string* handle) {
  Wire w{};
  std::memcpy(w.magic, kMagic, sizeof kMagic);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = Mappings().find(reinterpret_cast<uintptr_t>(ptr));
    if (it == Mappings().end() || it->second.fd < 0) {
      return KernelStatus::Error("IpcExport: not the start of an AllocShareable block");
    }
    w.fd = it->second.fd;
    w.bytes = static_cast<int64_t>(it->second.bytes);
  }
  w.pid = getpid();
  handle->assign(kIpcHandleBytes, '\0');
  std::memcpy(handle->data(), &w, sizeof w);
  return KernelStatus::Ok();
}

KernelStatus IpcOpen(const std::string& handle, size_t bytes, void** ptr) {
  *ptr = nullptr;
  Wire w{};
  if (handle.size() != kIpcHandleBytes) {
    return KernelStatus::Error("IpcOpen: a handle of " + std::to_string(handle.size()) +
                               " bytes (expected " + std::to_string(kIpcHandleBytes) + ")");
  }
  std::memcpy(&w, handle.data(), sizeof w);
  if (std::memcmp(w.magic, kMagic, sizeof kMagic) != 0) {
    return KernelStatus::Error("IpcOpen: not a handle of this emulation");
  }
  if (w.pid == getpid()) {
    // As cudaIpcOpenMemHandle, which refuses a handle of the calling process.
    return KernelStatus::Error("IpcOpen: a handle exported by this process");
  }
  if (w.bytes < 0 || static_cast<size_t>(w.bytes) < bytes) {
    return KernelStatus::Error("IpcOpen: the exported block holds " + std::to_string(w.bytes) +
                               " bytes, fewer than the " + std::to_string(bytes) + " asked for");
  }
  const std::string path = "/proc/" + std::to_string(w.pid) + "/fd/" + std::to_string(w.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return KernelStatus::Error(Errno(("IpcOpen: " + path).c_str()));
  struct stat st {};
  // The descriptor may have been closed and reused for another file by now: only a memfd of the
  // exported size is the block.
  if (fstat(fd, &st) != 0 || st.st_size != w.bytes) {
    close(fd);
    return KernelStatus::Error("IpcOpen: the exported block is gone (" + path + ")");
  }
  void* p = mmap(nullptr, static_cast<size_t>(w.bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the memory
  if (p == MAP_FAILED) return KernelStatus::Error(Errno("IpcOpen: mmap"));
  {
    std::lock_guard<std::mutex> lock(g_mu);
    Mappings()[reinterpret_cast<uintptr_t>(p)] = Mapping{-1, static_cast<size_t>(w.bytes)};
  }
  emulation::AddDeviceRange(p, static_cast<size_t>(w.bytes));
  *ptr = p;
  return KernelStatus::Ok();
}

KernelStatus IpcClose(void* ptr) {
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = Mappings().find(reinterpret_cast<uintptr_t>(ptr));
    if (it == Mappings().end() || it->second.fd >= 0) {
      return KernelStatus::Error("IpcClose: not a mapping IpcOpen made");
    }
    bytes = it->second.bytes;
    Mappings().erase(it);
  }
  emulation::RemoveDeviceRange(ptr);
  munmap(ptr, bytes);
  return KernelStatus::Ok();
}

}  // namespace hap::cuda
