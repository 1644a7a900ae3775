#include <string>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/gather_rows.h"

namespace hap::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 4096;  // grid-stride beyond: enough to fill an H100

struct alignas(16) Unit16 {
  unsigned v[4];
};

// One Unit per thread (grid-stride) over dst viewed as [n_idx, units_per_row].
template <typename Unit>
__global__ void GatherRowsKernel(const Unit* src, int64_t units_per_row, const int* idx,
                                 int64_t total, Unit* dst) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < total;
       u += stride) {
    const int64_t r = u / units_per_row;
    dst[u] = src[idx[r] * units_per_row + (u - r * units_per_row)];
  }
}

template <typename Unit>
KernelStatus LaunchGather(const void* src, size_t row_bytes, const int* idx, int64_t n_idx,
                          void* dst, Stream stream) {
  const int64_t units = static_cast<int64_t>(row_bytes / sizeof(Unit));
  const int64_t total = n_idx * units;
  const unsigned blocks =
      CeilDiv(total, kThreads) < kMaxBlocks ? CeilDiv(total, kThreads) : kMaxBlocks;
  return Launch("GatherRowsKernel", GatherRowsKernel<Unit>, dim3(blocks), dim3(kThreads), 0, stream,
                static_cast<const Unit*>(src), units, idx, total, static_cast<Unit*>(dst));
}

// GatherRowsKernel with each row's source computed from the kept list (GatherKeptRows).
template <typename Unit>
__global__ void GatherKeptRowsKernel(const Unit* src, int64_t units_per_row, int vis_begin,
                                     int n_vis, const int* kept, int n_kept, int64_t total,
                                     Unit* dst) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < total;
       u += stride) {
    const int64_t r = u / units_per_row;
    int64_t from = r;
    if (r >= vis_begin + n_kept) {
      from = r - n_kept + n_vis;
    } else if (r >= vis_begin) {
      const int k = kept[r - vis_begin];
      from = vis_begin + (k >= 0 && k < n_vis ? k : 0);
    }
    dst[u] = src[from * units_per_row + (u - r * units_per_row)];
  }
}

template <typename Unit>
KernelStatus LaunchGatherKept(const void* src, size_t row_bytes, int vis_begin, int n_vis,
                              const int* kept, int n_kept, int64_t n_out, void* dst,
                              Stream stream) {
  const int64_t units = static_cast<int64_t>(row_bytes / sizeof(Unit));
  const int64_t total = n_out * units;
  const unsigned blocks =
      CeilDiv(total, kThreads) < kMaxBlocks ? CeilDiv(total, kThreads) : kMaxBlocks;
  return Launch("GatherKeptRowsKernel", GatherKeptRowsKernel<Unit>, dim3(blocks), dim3(kThreads), 0,
                stream, static_cast<const Unit*>(src), units, vis_begin, n_vis, kept, n_kept, total,
                static_cast<Unit*>(dst));
}

}  // namespace

KernelStatus GatherKeptRows(const void* src, int n_tokens, size_t row_bytes, int vis_begin,
                            int n_vis, const int* kept, int n_kept, void* dst, Stream stream) {
  if (src == nullptr || dst == nullptr || (kept == nullptr && n_kept > 0)) {
    return KernelStatus::Error("GatherKeptRows: null pointer");
  }
  if (vis_begin < 0 || n_vis < 0 || vis_begin + n_vis > n_tokens || n_kept < 0 || n_kept > n_vis) {
    return KernelStatus::Error("GatherKeptRows: bad layout (n_tokens=" + std::to_string(n_tokens) +
                               " vis_begin=" + std::to_string(vis_begin) + " n_vis=" +
                               std::to_string(n_vis) + " n_kept=" + std::to_string(n_kept) + ")");
  }
  const int64_t n_out = int64_t{n_tokens} - n_vis + n_kept;
  const auto s = reinterpret_cast<uintptr_t>(src), d = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t src_bytes = static_cast<uintptr_t>(n_tokens) * row_bytes;
  const uintptr_t dst_bytes = static_cast<uintptr_t>(n_out) * row_bytes;
  if (dst_bytes == 0) return KernelStatus::Ok();
  if (s < d + dst_bytes && d < s + src_bytes) {
    return KernelStatus::Error("GatherKeptRows: dst overlaps src");
  }
  if (row_bytes % 16 == 0 && s % 16 == 0 && d % 16 == 0) {
    return LaunchGatherKept<Unit16>(src, row_bytes, vis_begin, n_vis, kept, n_kept, n_out, dst,
                                    stream);
  }
  if (row_bytes % 4 == 0 && s % 4 == 0 && d % 4 == 0) {
    return LaunchGatherKept<unsigned>(src, row_bytes, vis_begin, n_vis, kept, n_kept, n_out, dst,
                                      stream);
  }
  return LaunchGatherKept<unsigned char>(src, row_bytes, vis_begin, n_vis, kept, n_kept, n_out, dst,
                                         stream);
}

KernelStatus GatherRows(const void* src, size_t row_bytes, const int* idx, int64_t n_idx, void* dst,
                        Stream stream) {
  if (src == nullptr || dst == nullptr || (idx == nullptr && n_idx > 0) || n_idx < 0) {
    return KernelStatus::Error("GatherRows: null pointer or negative size");
  }
  const auto s = reinterpret_cast<uintptr_t>(src), d = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t dst_bytes = static_cast<uintptr_t>(n_idx) * row_bytes;
  if (dst_bytes == 0) return KernelStatus::Ok();
  if (s >= d && s < d + dst_bytes) {
    return KernelStatus::Error("GatherRows: src lies in dst (gather into a scratch buffer)");
  }
  if (row_bytes % 16 == 0 && s % 16 == 0 && d % 16 == 0) {
    return LaunchGather<Unit16>(src, row_bytes, idx, n_idx, dst, stream);
  }
  if (row_bytes % 4 == 0 && s % 4 == 0 && d % 4 == 0) {
    return LaunchGather<unsigned>(src, row_bytes, idx, n_idx, dst, stream);
  }
  return LaunchGather<unsigned char>(src, row_bytes, idx, n_idx, dst, stream);
}

}  // namespace hap::cuda
