// The SIMT emulation itself (kernels/cuda/simt): thread indexing, barriers, warp ops, atomics,
// shared memory — and that it exposes the bugs it exists to catch: a missing __syncthreads and
// warp ops whose lanes never all arrive.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/reduce.cuh"

namespace hap::cuda {
namespace {

__global__ void WriteIds(int* out) {
  const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int per_block = blockDim.x * blockDim.y * blockDim.z;
  out[block * per_block + thread] = block * 1000 + thread;
}

TEST(SimtTest, EveryThreadOfEveryBlockRunsOnceWithItsIndices) {
  const dim3 grid(3, 2, 2), block(5, 4, 3);
  std::vector<int> out(12 * 60, -1);
  ASSERT_TRUE(Launch("WriteIds", WriteIds, grid, block, 0, nullptr, out.data()).ok);
  for (int b = 0; b < 12; ++b) {
    for (int t = 0; t < 60; ++t) EXPECT_EQ(out[b * 60 + t], b * 1000 + t);
  }
}

__global__ void BlockSumKernel(const float* x, float* out, int n) {
  HAP_SHARED(float, scratch, 32);
  float v = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += x[blockIdx.x * n + i];
  v = BlockSum(v, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = v;
  // Every thread got the same sum.
  if (v != out[blockIdx.x] && threadIdx.x != 0) out[blockIdx.x] = -1.f;
}

TEST(SimtTest, BlockSumIsRightForEveryBlockSize) {
  for (int threads : {32, 64, 96, 256, 1024}) {
    const int n = 777, blocks = 3;
    std::vector<float> x(blocks * n);
    std::iota(x.begin(), x.end(), 0.f);
    std::vector<float> out(blocks, 0.f);
    ASSERT_TRUE(Launch("BlockSum", BlockSumKernel, dim3(blocks), dim3(threads), 0, nullptr,
                       x.data(), out.data(), n)
                    .ok);
    for (int b = 0; b < blocks; ++b) {
      const double want = (double(b) * n + (double(b) + 1) * n - 1) * n / 2;
      EXPECT_EQ(out[b], static_cast<float>(want)) << threads << " threads, block " << b;
    }
  }
}

// Each thread publishes its index in shared memory and reads its neighbour's.
__global__ void NeighbourRead(int* out, bool with_barrier) {
  HAP_SHARED(int, s, 64);
  s[threadIdx.x] = threadIdx.x;
  if (with_barrier) __syncthreads();
  out[blockIdx.x * 64 + threadIdx.x] = s[(threadIdx.x + 1) % 64];
}

TEST(SimtTest, AMissingBarrierGivesWrongValuesAndTheBarrierFixesThem) {
  const int blocks = 8;
  for (bool with_barrier : {false, true}) {
    std::vector<int> out(blocks * 64);
    ASSERT_TRUE(Launch("NeighbourRead", NeighbourRead, dim3(blocks), dim3(64), 0, nullptr,
                       out.data(), with_barrier)
                    .ok);
    int wrong = 0;
    for (int b = 0; b < blocks; ++b) {
      for (int t = 0; t < 64; ++t) wrong += out[b * 64 + t] != (t + 1) % 64;
    }
    if (with_barrier) {
      EXPECT_EQ(wrong, 0);
    } else {
      // Random order: about half the threads run before their neighbour wrote (0xFF bytes).
      EXPECT_GT(wrong, blocks * 64 / 4);
    }
  }
}

__global__ void Shuffles(int* out) {
  const int lane = threadIdx.x % 32;
  const int base = (threadIdx.x / 32) * 32 * 6;
  out[base + lane] = __shfl_xor_sync(kFullMask, lane * 10, 5);
  out[base + 32 + lane] = __shfl_down_sync(kFullMask, lane * 10, 3);
  out[base + 64 + lane] = __shfl_up_sync(kFullMask, lane * 10, 2, 16);
  out[base + 96 + lane] = __shfl_sync(kFullMask, lane * 10, 7, 8);
  out[base + 128 + lane] = static_cast<int>(__ballot_sync(kFullMask, lane % 3 == 0));
  float f = WarpSum(static_cast<float>(lane));
  out[base + 160 + lane] = static_cast<int>(f);
}

TEST(SimtTest, WarpShufflesAndVotesFollowCudaSemantics) {
  std::vector<int> out(2 * 32 * 6);
  ASSERT_TRUE(Launch("Shuffles", Shuffles, dim3(1), dim3(64), 0, nullptr, out.data()).ok);
  unsigned ballot = 0;
  for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
  for (int w = 0; w < 2; ++w) {
    const int* o = out.data() + w * 192;
    for (int l = 0; l < 32; ++l) {
      EXPECT_EQ(o[l], (l ^ 5) * 10);
      EXPECT_EQ(o[32 + l], (l + 3 < 32 ? l + 3 : l) * 10);
      EXPECT_EQ(o[64 + l], (l % 16 >= 2 ? l - 2 : l) * 10);
      EXPECT_EQ(o[96 + l], ((l & ~7) + 7) * 10);
      EXPECT_EQ(static_cast<unsigned>(o[128 + l]), ballot);
      EXPECT_EQ(o[160 + l], 31 * 32 / 2);
    }
  }
}

// The message of the fault a launch of `kernel` as one block of `threads` threads reports (over
// an output of one T per thread); a test failure when the launch succeeds.
template <typename T>
std::string FaultOf(const char* name, void (*kernel)(T*), int threads) {
  std::vector<T> out(threads);
  const KernelStatus s = Launch(name, kernel, dim3(1), dim3(threads), 0, nullptr, out.data());
  EXPECT_FALSE(s.ok) << name;
  return s.message;
}

__global__ void HalfWarpShuffle(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x < 16) v = __shfl_xor_sync(kFullMask, v, 1);
  out[threadIdx.x] = v;
}

TEST(SimtTest, AWarpOpSomeLanesNeverReachIsReportedNotHung) {
  const std::string message = FaultOf("HalfWarpShuffle", HalfWarpShuffle, 32);
  EXPECT_NE(message.find("deadlock"), std::string::npos) << message;
  EXPECT_NE(message.find("HalfWarpShuffle"), std::string::npos) << message;
}

__global__ void MaskWithoutSelf(int* out) { out[threadIdx.x] = __shfl_sync(0x1u, 1, 0); }

TEST(SimtTest, ALaneOutsideItsOwnMaskIsAFault) {
  const std::string message = FaultOf("MaskWithoutSelf", MaskWithoutSelf, 32);
  EXPECT_NE(message.find("does not contain it"), std::string::npos) << message;
}

__global__ void PartialWarpFullMask(int* out) {
  out[threadIdx.x] = __shfl_xor_sync(kFullMask, 1, 1);
}

TEST(SimtTest, AFullMaskInAPartialWarpIsAFault) {
  const std::string message = FaultOf("PartialWarpFullMask", PartialWarpFullMask, 40);
  EXPECT_NE(message.find("does not have"), std::string::npos) << message;
}

__global__ void TooMuchShared(float* out) {
  HAP_SHARED(float, big, 13000);  // 52 000 bytes > 48 KiB
  big[threadIdx.x] = 1.f;
  out[threadIdx.x] = big[threadIdx.x];
}

TEST(SimtTest, SharedMemoryBeyondTheBlockLimitIsAFault) {
  const std::string message = FaultOf("TooMuchShared", TooMuchShared, 32);
  EXPECT_NE(message.find("exceeds the block limit"), std::string::npos) << message;
}

__global__ void CountAtomically(int* counter, float* fsum) {
  atomicAdd(counter, 1);
  atomicAdd(fsum, 0.5f);
}

TEST(SimtTest, AtomicsFromEveryBlockAddUp) {
  int counter = 0;
  float fsum = 0.f;
  ASSERT_TRUE(
      Launch("CountAtomically", CountAtomically, dim3(37), dim3(128), 0, nullptr, &counter, &fsum)
          .ok);
  EXPECT_EQ(counter, 37 * 128);
  EXPECT_EQ(fsum, 37 * 128 * 0.5f);
}

__global__ void DynamicSharedKernel(int* out, int n) {
  HAP_DYNAMIC_SHARED(int, s);
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = i * 2;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = s[n - 1 - i];
}

TEST(SimtTest, DynamicSharedMemoryHoldsTheLaunchSize) {
  const int n = 3000;
  std::vector<int> out(n);
  ASSERT_TRUE(Launch("DynamicShared", DynamicSharedKernel, dim3(1), dim3(128), n * sizeof(int),
                     nullptr, out.data(), n)
                  .ok);
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], (n - 1 - i) * 2);
}

TEST(SimtTest, InvalidLaunchConfigurationsAreErrors) {
  std::vector<int> out(4096);
  EXPECT_FALSE(Launch("WriteIds", WriteIds, dim3(1), dim3(1025), 0, nullptr, out.data()).ok);
  EXPECT_FALSE(Launch("WriteIds", WriteIds, dim3(0), dim3(32), 0, nullptr, out.data()).ok);
  EXPECT_FALSE(Launch("WriteIds", WriteIds, dim3(1), dim3(32), 64 * 1024, nullptr, out.data()).ok);
}

}  // namespace
}  // namespace hap::cuda
