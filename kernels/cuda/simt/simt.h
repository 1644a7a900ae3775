// A host emulation of the CUDA execution model, so that the CUDA kernels under kernels/cuda run
// on a machine without a GPU: the same kernel source compiled by the host compiler against this
// header (kernels/cuda/device.cuh picks it when __CUDACC__ is not defined).
//
// Each CUDA thread of a block is a fiber with its own stack. A fiber runs until it reaches a
// barrier (__syncthreads), a warp-synchronous op (shuffles, votes, __syncwarp) or its end; the
// scheduler then picks the next runnable fiber at random (seeded per block), so a kernel whose
// threads read shared memory another thread writes without a barrier between them reads the
// wrong values in some order and gives a wrong result. Static shared arrays (HAP_SHARED) and
// dynamic shared memory start each block filled with 0xFF bytes (NaN as F32, -1 as integers), so
// a read before any write shows up too. Blocks of a grid run in parallel on the default thread
// pool; atomics are real atomics.
//
// Faults a GPU would hang or corrupt on (a warp op whose lanes never all arrive, a lane outside
// its own mask, a shuffle reading a lane not in the mask, shared memory past the 48 KiB a block
// may use without opt-in, an invalid launch configuration) end the launch with an error message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>

namespace hap::simt {

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1)
      : x(x_), y(y_), z(z_) {}
};

// The CUDA thread a fiber stands for.
struct ThreadContext {
  dim3 thread_idx;
  dim3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

// Limits of the devices the kernels target (sm_80, sm_90) that the emulation enforces.
inline constexpr int kWarpSize = 32;
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr size_t kMaxSharedBytesPerBlock = 48 * 1024;  // without cudaFuncSetAttribute

// The running CUDA thread (only inside a kernel run by Launch).
const ThreadContext& Current();

// __syncthreads(): waits until every thread of the block still running has arrived.
void SyncThreads();
// The warp-synchronous exchange under shuffles and votes: every lane of `mask` (which must
// contain the calling lane) deposits `value`; returns the 32 deposited values, valid until this
// lane's next warp op. Lanes outside the mask have undefined slots.
const uint64_t* WarpExchange(unsigned mask, uint64_t value);
// The calling thread's lane (0..31).
int LaneId();
// Static shared arrays: every thread of a block gets the same pointer for its n-th call, so
// HAP_SHARED declarations must run unconditionally, in the same order, in every thread.
void* SharedArray(size_t bytes, size_t align);
// The block's dynamic shared memory (the launch's smem bytes).
void* DynamicShared();
// Ends the launch with a fault message (a kernel's own check failed, e.g. a bad lane).
[[noreturn]] void Fault(const std::string& message);

// Runs `kernel` once per thread of every block of the grid. Returns "" on success, else what
// went wrong ("<name>: ..."). Not reentrant from inside a kernel.
std::string Launch(const char* name, dim3 grid, dim3 block, size_t dynamic_smem,
                   const std::function<void()>& kernel);

// Launches so far (every Launch call, failed ones included), and those of the kernel `name`.
uint64_t LaunchCount();
uint64_t LaunchCount(const std::string& name);

// The seed of the scheduler's thread order for the next launches (each block's order is drawn
// from the seed, the launch count and the block index). HAP_SIMT_SEED sets it at start-up.
void SetSeed(uint64_t seed);

// --- Device-side intrinsics built on the primitives above ---------------------------------

template <typename T>
uint64_t ToBits(T v) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "warp ops move at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}

template <typename T>
T FromBits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

// The lane whose value `lane` reads; `lane` itself where CUDA returns the caller's own value.
template <typename T>
T ShuffleFrom(unsigned mask, T v, int src) {
  const int lane = LaneId();
  const uint64_t* slots = WarpExchange(mask, ToBits(v));
  if (!(mask >> src & 1u)) {
    Fault("lane " + std::to_string(lane) + " reads lane " + std::to_string(src) +
          ", which is not in the shuffle's mask");
  }
  return FromBits<T>(slots[src]);
}

template <typename T>
T ShflSync(unsigned mask, T v, int src_lane, int width) {
  const int lane = LaneId();
  const int base = lane & ~(width - 1);
  return ShuffleFrom(mask, v, base + (src_lane & (width - 1)));
}

template <typename T>
T ShflXorSync(unsigned mask, T v, int lane_mask, int width) {
  const int lane = LaneId();
  const int base = lane & ~(width - 1);
  int src = lane ^ lane_mask;
  if (src < base || src >= base + width) src = lane;
  return ShuffleFrom(mask, v, src);
}

template <typename T>
T ShflDownSync(unsigned mask, T v, unsigned delta, int width) {
  const int lane = LaneId();
  const int in_seg = lane & (width - 1);
  const int src = in_seg + static_cast<int>(delta) < width ? lane + static_cast<int>(delta) : lane;
  return ShuffleFrom(mask, v, src);
}

template <typename T>
T ShflUpSync(unsigned mask, T v, unsigned delta, int width) {
  const int lane = LaneId();
  const int in_seg = lane & (width - 1);
  const int src = in_seg >= static_cast<int>(delta) ? lane - static_cast<int>(delta) : lane;
  return ShuffleFrom(mask, v, src);
}

inline unsigned BallotSync(unsigned mask, bool pred) {
  const uint64_t* slots = WarpExchange(mask, pred ? 1u : 0u);
  unsigned out = 0;
  for (int l = 0; l < kWarpSize; ++l) {
    if ((mask >> l & 1u) && slots[l]) out |= 1u << l;
  }
  return out;
}

template <typename T>
T AtomicAdd(T* addr, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    Bits* p = reinterpret_cast<Bits*>(addr);
    Bits old = __atomic_load_n(p, __ATOMIC_RELAXED);
    for (;;) {
      T cur;
      std::memcpy(&cur, &old, sizeof(T));
      const T next = cur + v;
      Bits next_bits;
      std::memcpy(&next_bits, &next, sizeof(T));
      if (__atomic_compare_exchange_n(p, &old, next_bits, true, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED)) {
        return cur;
      }
    }
  } else {
    return __atomic_fetch_add(addr, v, __ATOMIC_RELAXED);
  }
}

template <typename T>
T AtomicMax(T* addr, T v) {
  T old = __atomic_load_n(addr, __ATOMIC_RELAXED);
  while (old < v &&
         !__atomic_compare_exchange_n(addr, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}

template <typename T>
T AtomicMin(T* addr, T v) {
  T old = __atomic_load_n(addr, __ATOMIC_RELAXED);
  while (old > v &&
         !__atomic_compare_exchange_n(addr, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}

template <typename T>
T AtomicCas(T* addr, T expected, T desired) {
  __atomic_compare_exchange_n(addr, &expected, desired, false, __ATOMIC_RELAXED,
                              __ATOMIC_RELAXED);
  return expected;
}

}  // namespace hap::simt
