// A cache of device blocks between the CUDA backend's Allocate/Free and DeviceAlloc/DeviceFree.
// On a GPU cudaFree waits for the whole device, and the request path frees its temporaries (a
// step's workspace and logits, a pruner's maps, a finished request's KV cache) many times per
// prefill and per decode step. A block freed by the thread that allocated it goes back to that
// thread's cache — everything that thread did with it was ordered on its stream, as is the next
// use — and its next allocation of the same size class takes it without calling the runtime. A
// block freed by another thread, every block of a thread that ends, and every cached block when
// an allocation finds the device full (Trim) go back to the device: cudaFree orders them after all
// pending work. This relies on how the backend is used: a thread never frees a block while another
// thread's stream still has work queued on it (hand-overs between threads go through copies that
// wait). Sizes are rounded up to classes: multiples of 256 bytes up to 4 KiB, eight classes per
// power of two up to 16 MiB, multiples of 2 MiB from there (at most 12.5% more than asked, and
// next to nothing for weight matrices, which are multiples of 2 MiB or close). Under
// AddressSanitizer nothing is cached, so a use after Free of emulated device memory is still
// reported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

class BlockCache {
 public:
  // The process's cache (never destroyed: threads may free blocks while the process exits).
  static BlockCache& Get();

  // *ptr = at least `bytes` of device memory, 256-byte aligned.
  KernelStatus Allocate(void** ptr, size_t bytes);
  // Takes back what Allocate gave (see above for where it goes).
  KernelStatus Free(void* ptr);
  // Gives every cached block back to the device.
  KernelStatus Trim();
  // Bytes held for reuse, allocated on the device and in nobody's use.
  int64_t CachedBytes() const;
  // Device bytes of every block the cache has taken (in use or cached), and the bytes asked for
  // of those in use: what the backend reports as in use is the device's total less the first
  // plus the second, as if every allocation had taken exactly what it asked for.
  int64_t HeldBytes() const;
  int64_t LiveBytes() const;

  // The bytes Allocate takes from the device for a request of `bytes`.
  static size_t SizeClass(size_t bytes);

 private:
  struct Block {
    size_t bytes;      // its size class
    size_t requested;  // what its current user asked for (0 while cached)
    uint64_t owner;    // the allocating thread's id; 0 once that thread has ended
  };
  BlockCache() = default;
  // The calling thread's id (1, 2, ...): the first call registers the thread's exit.
  static uint64_t ThisThread();
  // A thread ends: its cached blocks go back to the device, its live ones will when freed.
  void ReleaseThread(uint64_t thread);
  friend struct ThreadExit;

  mutable std::mutex mu_;
  std::unordered_map<void*, Block> blocks_;                           // every block handed out
  std::map<std::pair<uint64_t, size_t>, std::vector<void*>> cached_;  // (thread, class) → blocks
  int64_t cached_bytes_ = 0;
  int64_t held_bytes_ = 0;
  int64_t live_bytes_ = 0;
};

}  // namespace hap::cuda
