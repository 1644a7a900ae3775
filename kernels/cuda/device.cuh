// What every kernel source under kernels/cuda includes. Compiled by nvcc it is CUDA itself;
// compiled by the host compiler (HAP_SIMT_EMULATION) it maps the CUDA keywords, built-in
// variables and intrinsics the kernels use onto the SIMT emulation (kernels/cuda/simt), so the
// parity tests execute the very source a GPU runs.
//
// Three spellings differ from plain CUDA, because the emulation cannot express them otherwise:
//   HAP_SHARED(type, name, count)   for  __shared__ type name[count];
//   HAP_DYNAMIC_SHARED(type, name)  for  extern __shared__ type name[];
//   HAP_NOINLINE                    for  __noinline__ (a name the host's own headers use);
// and kernels are launched through hap::cuda::Launch rather than <<<...>>>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"
#include "kernels/cuda/op_profile.h"

#if defined(__CUDACC__)

#include <cuda_runtime.h>

#define HAP_NOINLINE __noinline__
#define HAP_SHARED(type, name, count) __shared__ type name[count]
#define HAP_DYNAMIC_SHARED(type, name)                          \
  extern __shared__ __align__(16) unsigned char hap_dynamic_smem_[]; \
  type* name = reinterpret_cast<type*>(hap_dynamic_smem_)

#else  // the host emulation

#include <algorithm>
#include <cmath>
#include <functional>

#include "kernels/cuda/graph.h"
#include "kernels/cuda/simt/simt.h"

using dim3 = ::hap::simt::dim3;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define HAP_NOINLINE __attribute__((noinline))
#define __launch_bounds__(...)
#define threadIdx (::hap::simt::Current().thread_idx)
#define blockIdx (::hap::simt::Current().block_idx)
#define blockDim (::hap::simt::Current().block_dim)
#define gridDim (::hap::simt::Current().grid_dim)
#define warpSize (::hap::simt::kWarpSize)

#define HAP_SHARED(type, name, count) \
  type* name = static_cast<type*>(::hap::simt::SharedArray(sizeof(type) * (count), alignof(type)))
#define HAP_DYNAMIC_SHARED(type, name) \
  type* name = static_cast<type*>(::hap::simt::DynamicShared())

inline void __syncthreads() { ::hap::simt::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::hap::simt::WarpExchange(mask, 0); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return ::hap::simt::ShflSync(mask, v, src_lane, width);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return ::hap::simt::ShflXorSync(mask, v, lane_mask, width);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::hap::simt::ShflDownSync(mask, v, delta, width);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::hap::simt::ShflUpSync(mask, v, delta, width);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return ::hap::simt::BallotSync(mask, pred != 0);
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }

template <typename T>
T atomicAdd(T* addr, T v) {
  return ::hap::simt::AtomicAdd(addr, v);
}
template <typename T>
T atomicMax(T* addr, T v) {
  return ::hap::simt::AtomicMax(addr, v);
}
template <typename T>
T atomicMin(T* addr, T v) {
  return ::hap::simt::AtomicMin(addr, v);
}
template <typename T>
T atomicCAS(T* addr, T expected, T desired) {
  return ::hap::simt::AtomicCas(addr, expected, desired);
}

// A load through L2 only (the GPU's L1 is not coherent between blocks): a plain load here.
template <typename T>
T __ldcg(const T* p) {
  return *p;
}
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
// The host compiler targets x86-64 without FMA: it never fuses these.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline void sincosf(float x, float* s, float* c) {
  *s = std::sin(x);
  *c = std::cos(x);
}
inline void sincos(double x, double* s, double* c) {
  *s = std::sin(x);
  *c = std::cos(x);
}
inline unsigned __float_as_uint(float x) {
  unsigned u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
using std::max;
using std::min;

#endif

namespace hap::cuda {

// Launches `kernel` over grid × block threads with `smem` bytes of dynamic shared memory on
// `stream`. The launch is asynchronous on a GPU: errors the kernel hits later surface at the
// next synchronisation.
template <typename... KArgs, typename... Args>
KernelStatus Launch(const char* name, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                    size_t smem, Stream stream, Args&&... args) {
  static_assert(sizeof...(KArgs) == sizeof...(Args), "kernel argument count");
#if defined(__CUDACC__)
  std::tuple<KArgs...> values(std::forward<Args>(args)...);
  void* pointers[sizeof...(KArgs) + 1];
  std::apply([&](auto&... v) {
    int i = 0;
    ((pointers[i++] = static_cast<void*>(&v)), ...);
  }, values);
  profile::Begin(stream);
  const cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block,
                                         pointers, smem, static_cast<cudaStream_t>(stream));
  profile::End(stream, name);
  if (e != cudaSuccess) {
    return KernelStatus::Error(std::string(name) + ": " + cudaGetErrorString(e));
  }
  return KernelStatus::Ok();
#else
  (void)stream;
  // Run now, or kept for a graph's replays (kernels/cuda/graph.h) with these argument values.
  const std::function<KernelStatus()> run =
      [name, kernel, grid, block, smem,
       values = std::tuple<KArgs...>(std::forward<Args>(args)...)] {
        std::string fault =
            ::hap::simt::Launch(name, grid, block, smem, [&] { std::apply(kernel, values); });
        return fault.empty() ? KernelStatus::Ok() : KernelStatus::Error(std::move(fault));
      };
  if (emulation::Record(run)) return KernelStatus::Ok();
  return run();
#endif
}

inline unsigned CeilDiv(int64_t n, int64_t d) { return static_cast<unsigned>((n + d - 1) / d); }

}  // namespace hap::cuda
