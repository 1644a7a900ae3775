#include "kernels/cuda/block_cache.h"

#include <atomic>

#include "kernels/cuda/device_memory.h"

namespace hap::cuda {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCaches = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kCaches = false;
#else
constexpr bool kCaches = true;
#endif
#else
constexpr bool kCaches = true;
#endif

std::atomic<uint64_t> g_next_thread{1};

}  // namespace

// Gives a thread's cached blocks back when the thread ends.
struct ThreadExit {
  uint64_t id = g_next_thread.fetch_add(1);
  ~ThreadExit() { BlockCache::Get().ReleaseThread(id); }
};

BlockCache& BlockCache::Get() {
  static BlockCache* cache = new BlockCache();
  return *cache;
}

uint64_t BlockCache::ThisThread() {
  thread_local ThreadExit thread;
  return thread.id;
}

size_t BlockCache::SizeClass(size_t bytes) {
  constexpr size_t kLarge = size_t{16} << 20, kLargeStep = size_t{2} << 20;
  if (bytes <= 4096) return bytes == 0 ? 256 : (bytes + 255) / 256 * 256;
  if (bytes >= kLarge) return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
  size_t power = 4096;
  while (power * 2 <= bytes) power *= 2;
  const size_t step = power / 8;
  return (bytes + step - 1) / step * step;
}

KernelStatus BlockCache::Allocate(void** ptr, size_t bytes) {
  const size_t size = SizeClass(bytes);
  const uint64_t thread = ThisThread();
  if (kCaches) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cached_.find({thread, size});
    if (it != cached_.end() && !it->second.empty()) {
      *ptr = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= static_cast<int64_t>(size);
      blocks_[*ptr].requested = bytes;
      live_bytes_ += static_cast<int64_t>(bytes);
      return KernelStatus::Ok();
    }
  }
  KernelStatus s = DeviceAlloc(ptr, size);
  if (!s.ok && s.out_of_memory && CachedBytes() > 0) {
    // What the threads keep for reuse may be what the device lacks.
    KernelStatus trimmed = Trim();
    if (!trimmed.ok) return trimmed;
    s = DeviceAlloc(ptr, size);
  }
  if (!s.ok) return s;
  std::lock_guard<std::mutex> lock(mu_);
  blocks_[*ptr] = {size, bytes, thread};
  held_bytes_ += static_cast<int64_t>(size);
  live_bytes_ += static_cast<int64_t>(bytes);
  return s;
}

KernelStatus BlockCache::Free(void* ptr) {
  if (ptr == nullptr) return KernelStatus::Ok();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) return KernelStatus::Error("BlockCache::Free: not a cached block");
    Block& block = it->second;
    live_bytes_ -= static_cast<int64_t>(block.requested);
    block.requested = 0;
    if (kCaches && block.owner == ThisThread()) {
      cached_[{block.owner, block.bytes}].push_back(ptr);
      cached_bytes_ += static_cast<int64_t>(block.bytes);
      return KernelStatus::Ok();
    }
    held_bytes_ -= static_cast<int64_t>(block.bytes);
    blocks_.erase(it);
  }
  return DeviceFree(ptr);
}

KernelStatus BlockCache::Trim() {
  std::vector<void*> freed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, blocks] : cached_) {
      for (void* p : blocks) {
        blocks_.erase(p);
        freed.push_back(p);
      }
    }
    cached_.clear();
    held_bytes_ -= cached_bytes_;
    cached_bytes_ = 0;
  }
  KernelStatus status = KernelStatus::Ok();
  for (void* p : freed) {
    KernelStatus s = DeviceFree(p);
    if (!s.ok && status.ok) status = s;
  }
  return status;
}

void BlockCache::ReleaseThread(uint64_t thread) {
  std::vector<void*> freed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = cached_.begin(); it != cached_.end();) {
      if (it->first.first != thread) {
        ++it;
        continue;
      }
      for (void* p : it->second) {
        blocks_.erase(p);
        freed.push_back(p);
        cached_bytes_ -= static_cast<int64_t>(it->first.second);
        held_bytes_ -= static_cast<int64_t>(it->first.second);
      }
      it = cached_.erase(it);
    }
    for (auto& [p, block] : blocks_) {
      if (block.owner == thread) block.owner = 0;
    }
  }
  for (void* p : freed) DeviceFree(p);
}

int64_t BlockCache::CachedBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_bytes_;
}

int64_t BlockCache::HeldBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_bytes_;
}

int64_t BlockCache::LiveBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_bytes_;
}

}  // namespace hap::cuda
