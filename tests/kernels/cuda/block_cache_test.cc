// The CUDA backend's block cache (kernels/cuda/block_cache.h) on the emulated device memory: a
// block freed by its thread is handed to that thread's next allocation of its size class without
// touching the device; one freed by another thread, the blocks of a thread that ended and, on
// Trim, every cached block go back to the device.
#include "kernels/cuda/block_cache.h"

#include <thread>

#include "gtest/gtest.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/emulation_counts.h"

namespace hap::cuda {
namespace {

using emulation::DeviceAllocations;
using emulation::DeviceFrees;

TEST(BlockCache, SizeClassesWasteAtMostAnEighth) {
  EXPECT_EQ(BlockCache::SizeClass(0), 256u);
  EXPECT_EQ(BlockCache::SizeClass(1), 256u);
  EXPECT_EQ(BlockCache::SizeClass(4096), 4096u);
  EXPECT_EQ(BlockCache::SizeClass(4097), 4096u + 512u);
  EXPECT_EQ(BlockCache::SizeClass(10000), 10240u);  // 8192 + 2·1024
  EXPECT_EQ(BlockCache::SizeClass(size_t{16} << 20), size_t{16} << 20);
  // An 11008 x 4096 BF16 matrix is a multiple of 2 MiB: no waste.
  EXPECT_EQ(BlockCache::SizeClass(size_t{11008} * 4096 * 2), size_t{11008} * 4096 * 2);
  for (size_t bytes = 1; bytes < (size_t{64} << 20); bytes = bytes * 3 / 2 + 7) {
    const size_t c = BlockCache::SizeClass(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_EQ(c % 256, 0u);
    if (bytes > 4096) EXPECT_LE(c - bytes, bytes / 8) << bytes;
  }
}

#if !defined(__SANITIZE_ADDRESS__)
TEST(BlockCache, ABlockFreedByItsThreadIsReusedWithoutTheDevice) {
  BlockCache& cache = BlockCache::Get();
  ASSERT_TRUE(cache.Trim().ok);
  void* a = nullptr;
  int64_t allocs = DeviceAllocations();
  const int64_t live = cache.LiveBytes(), held = cache.HeldBytes();
  ASSERT_TRUE(cache.Allocate(&a, 10000).ok);
  EXPECT_EQ(DeviceAllocations() - allocs, 1);
  EXPECT_TRUE(IsDeviceRange(a, 10000));
  EXPECT_EQ(cache.LiveBytes() - live, 10000);  // what was asked for
  EXPECT_EQ(cache.HeldBytes() - held, 10240);  // what the device gave
  const int64_t frees = DeviceFrees();
  ASSERT_TRUE(cache.Free(a).ok);
  EXPECT_EQ(DeviceFrees(), frees);  // kept for reuse
  EXPECT_EQ(cache.CachedBytes(), 10240);
  EXPECT_EQ(cache.LiveBytes(), live);
  EXPECT_EQ(cache.HeldBytes() - held, 10240);
  void* b = nullptr;
  allocs = DeviceAllocations();
  ASSERT_TRUE(cache.Allocate(&b, 9300).ok);  // the same class
  EXPECT_EQ(b, a);
  EXPECT_EQ(DeviceAllocations(), allocs);
  EXPECT_EQ(cache.CachedBytes(), 0);
  void* c = nullptr;
  ASSERT_TRUE(cache.Allocate(&c, 20000).ok);  // another class: a new block
  EXPECT_NE(c, a);
  EXPECT_EQ(DeviceAllocations() - allocs, 1);

  // Freed by another thread: back to the device at once (that thread's stream never ordered the
  // owner's work on it).
  int64_t before = DeviceFrees();
  std::thread([&] { EXPECT_TRUE(cache.Free(b).ok); }).join();
  EXPECT_EQ(DeviceFrees() - before, 1);
  EXPECT_FALSE(IsDeviceRange(b, 1));

  // Trim gives back what is cached.
  ASSERT_TRUE(cache.Free(c).ok);
  EXPECT_EQ(cache.CachedBytes(), 20480);
  before = DeviceFrees();
  ASSERT_TRUE(cache.Trim().ok);
  EXPECT_EQ(DeviceFrees() - before, 1);
  EXPECT_EQ(cache.CachedBytes(), 0);
}

TEST(BlockCache, AThreadThatEndsGivesItsBlocksBack) {
  BlockCache& cache = BlockCache::Get();
  ASSERT_TRUE(cache.Trim().ok);
  void* kept = nullptr;
  const int64_t frees = DeviceFrees();
  std::thread([&] {
    void* cached = nullptr;
    ASSERT_TRUE(cache.Allocate(&cached, 4096).ok);
    ASSERT_TRUE(cache.Free(cached).ok);
    ASSERT_TRUE(cache.Allocate(&kept, 8192).ok);
    ASSERT_TRUE(cache.Allocate(&cached, 4096).ok);  // the cached block again
    ASSERT_TRUE(cache.Free(cached).ok);
  }).join();
  EXPECT_EQ(DeviceFrees() - frees, 1);  // its cached block, when it ended
  EXPECT_EQ(cache.CachedBytes(), 0);
  ASSERT_TRUE(cache.Free(kept).ok);  // its live block, freed later by another thread
  EXPECT_EQ(DeviceFrees() - frees, 2);
}
#endif

TEST(BlockCache, FreeingWhatItDidNotGiveIsAnError) {
  int local = 0;
  EXPECT_FALSE(BlockCache::Get().Free(&local).ok);
  EXPECT_TRUE(BlockCache::Get().Free(nullptr).ok);
}

}  // namespace
}  // namespace hap::cuda
