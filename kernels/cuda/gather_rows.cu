#include <algorithm>
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

// GatherRowsKernel with each row's source computed from the kept list (GatherKeptRows): what
// the threads along the grid's x extent copy.
template <typename Unit>
__device__ __forceinline__ void GatherKeptRowsBody(const Unit* src, int64_t units_per_row,
                                                   int vis_begin, int n_vis, const int* kept,
                                                   int n_kept, int64_t total, Unit* dst) {
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
__global__ void GatherKeptRowsKernel(const Unit* src, int64_t units_per_row, int vis_begin,
                                     int n_vis, const int* kept, int n_kept, int64_t total,
                                     Unit* dst) {
  GatherKeptRowsBody<Unit>(src, units_per_row, vis_begin, n_vis, kept, n_kept, total, dst);
}

// One array of GatherKeptRowsPair, in units of the kernel's type for it.
struct KeptRowsJob {
  const void* src;
  void* dst;
  int64_t units_per_row;
  int64_t total;  // units of dst
};

// Two arrays with one layout and kept list: job a along blockIdx.y = 0 in UnitA, job b along 1 in
// UnitB.
template <typename UnitA, typename UnitB>
__global__ void GatherKeptRowsPairKernel(KeptRowsJob a, KeptRowsJob b, int vis_begin, int n_vis,
                                         const int* kept, int n_kept) {
  if (blockIdx.y == 0) {
    GatherKeptRowsBody<UnitA>(static_cast<const UnitA*>(a.src), a.units_per_row, vis_begin, n_vis,
                              kept, n_kept, a.total, static_cast<UnitA*>(a.dst));
  } else {
    GatherKeptRowsBody<UnitB>(static_cast<const UnitB*>(b.src), b.units_per_row, vis_begin, n_vis,
                              kept, n_kept, b.total, static_cast<UnitB*>(b.dst));
  }
}

// The widest unit (16, 4 or 1 bytes) that row_bytes and both pointers' alignment allow.
int UnitBytes(const void* src, const void* dst, size_t row_bytes) {
  const auto s = reinterpret_cast<uintptr_t>(src), d = reinterpret_cast<uintptr_t>(dst);
  if (row_bytes % 16 == 0 && s % 16 == 0 && d % 16 == 0) return 16;
  if (row_bytes % 4 == 0 && s % 4 == 0 && d % 4 == 0) return 4;
  return 1;
}

// GatherKeptRows' checks of its layout and of one array; n_out gets the rows dst takes.
KernelStatus CheckKept(const char* op, const void* src, int n_tokens, size_t row_bytes,
                       int vis_begin, int n_vis, const int* kept, int n_kept, const void* dst,
                       int64_t* n_out) {
  if (src == nullptr || dst == nullptr || (kept == nullptr && n_kept > 0)) {
    return KernelStatus::Error(std::string(op) + ": null pointer");
  }
  if (vis_begin < 0 || n_vis < 0 || vis_begin + n_vis > n_tokens || n_kept < 0 || n_kept > n_vis) {
    return KernelStatus::Error(
        std::string(op) + ": bad layout (n_tokens=" + std::to_string(n_tokens) +
        " vis_begin=" + std::to_string(vis_begin) + " n_vis=" + std::to_string(n_vis) +
        " n_kept=" + std::to_string(n_kept) + ")");
  }
  *n_out = int64_t{n_tokens} - n_vis + n_kept;
  const auto s = reinterpret_cast<uintptr_t>(src), d = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t src_bytes = static_cast<uintptr_t>(n_tokens) * row_bytes;
  const uintptr_t dst_bytes = static_cast<uintptr_t>(*n_out) * row_bytes;
  if (dst_bytes > 0 && s < d + dst_bytes && d < s + src_bytes) {
    return KernelStatus::Error(std::string(op) + ": dst overlaps src");
  }
  return KernelStatus::Ok();
}

unsigned GatherBlocks(int64_t total) {
  return CeilDiv(total, kThreads) < kMaxBlocks ? CeilDiv(total, kThreads) : kMaxBlocks;
}

template <typename UnitA, typename UnitB>
KernelStatus LaunchGatherKeptPair(const KeptRowsJob& a, const KeptRowsJob& b, int vis_begin,
                                  int n_vis, const int* kept, int n_kept, Stream stream) {
  const unsigned blocks = std::max(GatherBlocks(a.total), GatherBlocks(b.total));
  return Launch("GatherKeptRowsPairKernel", GatherKeptRowsPairKernel<UnitA, UnitB>, dim3(blocks, 2),
                dim3(kThreads), 0, stream, a, b, vis_begin, n_vis, kept, n_kept);
}

template <typename UnitA>
KernelStatus LaunchGatherKeptPairWithB(int b_unit, const KeptRowsJob& a, const KeptRowsJob& b,
                                       int vis_begin, int n_vis, const int* kept, int n_kept,
                                       Stream stream) {
  switch (b_unit) {
    case 16:
      return LaunchGatherKeptPair<UnitA, Unit16>(a, b, vis_begin, n_vis, kept, n_kept, stream);
    case 4:
      return LaunchGatherKeptPair<UnitA, unsigned>(a, b, vis_begin, n_vis, kept, n_kept, stream);
    default:
      return LaunchGatherKeptPair<UnitA, unsigned char>(a, b, vis_begin, n_vis, kept, n_kept,
                                                        stream);
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
  int64_t n_out = 0;
  const KernelStatus st = CheckKept("GatherKeptRows", src, n_tokens, row_bytes, vis_begin, n_vis,
                                    kept, n_kept, dst, &n_out);
  if (!st.ok) return st;
  if (n_out * row_bytes == 0) return KernelStatus::Ok();
  switch (UnitBytes(src, dst, row_bytes)) {
    case 16:
      return LaunchGatherKept<Unit16>(src, row_bytes, vis_begin, n_vis, kept, n_kept, n_out, dst,
                                      stream);
    case 4:
      return LaunchGatherKept<unsigned>(src, row_bytes, vis_begin, n_vis, kept, n_kept, n_out, dst,
                                        stream);
    default:
      return LaunchGatherKept<unsigned char>(src, row_bytes, vis_begin, n_vis, kept, n_kept, n_out,
                                             dst, stream);
  }
}

KernelStatus GatherKeptRowsPair(const void* a_src, size_t a_row_bytes, void* a_dst,
                                const void* b_src, size_t b_row_bytes, void* b_dst, int n_tokens,
                                int vis_begin, int n_vis, const int* kept, int n_kept,
                                Stream stream) {
  int64_t n_out = 0;
  KernelStatus st = CheckKept("GatherKeptRowsPair", a_src, n_tokens, a_row_bytes, vis_begin, n_vis,
                              kept, n_kept, a_dst, &n_out);
  if (!st.ok) return st;
  st = CheckKept("GatherKeptRowsPair", b_src, n_tokens, b_row_bytes, vis_begin, n_vis, kept, n_kept,
                 b_dst, &n_out);
  if (!st.ok) return st;
  if (a_row_bytes == 0 || b_row_bytes == 0) {
    return KernelStatus::Error("GatherKeptRowsPair: rows of 0 bytes");
  }
  if (n_out == 0) return KernelStatus::Ok();
  const int a_unit = UnitBytes(a_src, a_dst, a_row_bytes);
  const int b_unit = UnitBytes(b_src, b_dst, b_row_bytes);
  const KeptRowsJob a{a_src, a_dst, static_cast<int64_t>(a_row_bytes) / a_unit,
                      n_out * static_cast<int64_t>(a_row_bytes) / a_unit};
  const KeptRowsJob b{b_src, b_dst, static_cast<int64_t>(b_row_bytes) / b_unit,
                      n_out * static_cast<int64_t>(b_row_bytes) / b_unit};
  switch (a_unit) {
    case 16:
      return LaunchGatherKeptPairWithB<Unit16>(b_unit, a, b, vis_begin, n_vis, kept, n_kept,
                                               stream);
    case 4:
      return LaunchGatherKeptPairWithB<unsigned>(b_unit, a, b, vis_begin, n_vis, kept, n_kept,
                                                 stream);
    default:
      return LaunchGatherKeptPairWithB<unsigned char>(b_unit, a, b, vis_begin, n_vis, kept, n_kept,
                                                      stream);
  }
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
