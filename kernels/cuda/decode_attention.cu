#include <string>

#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/device.cuh"
#include "kernels/cuda/reduce.cuh"

namespace hap::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kPerLane = kMaxDecodeHeadDim / 32;  // head elements a lane holds: d = lane + 32·e

__device__ __forceinline__ float Widen(float x) { return x; }
// BF16 is the top half of an F32: widening is exact.
__device__ __forceinline__ float Widen(uint16_t bits) {
  return __uint_as_float(static_cast<unsigned>(bits) << 16);
}

// Block = (query head h, sequence blockIdx.y, slice blockIdx.z). The sequence's rows are split
// into pieces of kDecodeRowsPerSplit by their position in the sequence; the block takes pieces
// z, z + gridDim.z, ... (one piece when gridDim.z covers the sequence). Within a piece, warp w
// takes the rows w, w + kWarps, ...: its lanes hold q and the output elements d = lane + 32·e,
// read each row's key and value as one coalesced pass, sum q·k across the warp (every lane gets
// the same sum), and keep their own online softmax (m, l, o). The block then merges its warps'
// states in warp order; with one slice it writes out = o / l, else its (o, m, l) to `parts` for
// CombineKernel.
template <typename KV>
__global__ __launch_bounds__(kThreads) void DecodeAttentionSplitKernel(DecodeAttentionArgs a,
                                                                       float* part_o,
                                                                       float* part_ml) {
  HAP_SHARED(float, warp_m, kWarps);
  HAP_SHARED(float, warp_l, kWarps);
  HAP_SHARED(float, warp_o, kWarps* kMaxDecodeHeadDim);
  const int hd = a.head_dim;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int h = blockIdx.x;
  const int seq = blockIdx.y;
  const int slice = blockIdx.z;
  const int kvh = h / (a.n_heads / a.n_kv_heads);
  const int64_t kv_stride = static_cast<int64_t>(a.n_kv_heads) * hd;
  const int64_t q_row = (static_cast<int64_t>(seq) * a.n_heads + h) * hd;
  const int first_span = a.span_begin != nullptr ? a.span_begin[seq] : 0;
  const int n_spans = a.span_begin != nullptr ? a.span_begin[seq + 1] - first_span : a.n_spans;
  const KvSpan* spans = a.spans + first_span;

  float q[kPerLane];
  float acc[kPerLane];
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    q[e] = d < hd ? a.q[q_row + d] : 0.f;
    acc[e] = 0.f;
  }
  int n_rows = 0;
  for (int i = 0; i < n_spans; ++i) n_rows += max(spans[i].rows, 0);
  const int n_pieces = (n_rows + kDecodeRowsPerSplit - 1) / kDecodeRowsPerSplit;

  float m = -INFINITY;
  float l = 0.f;
  for (int piece = slice; piece < n_pieces; piece += gridDim.z) {
    const int begin = piece * kDecodeRowsPerSplit;
    const int end = min(begin + kDecodeRowsPerSplit, n_rows);
    int base = 0;  // the sequence's row at which span i starts
    for (int i = 0; i < n_spans && base < end; ++i) {
      const int rows = max(spans[i].rows, 0);
      const int lo = max(begin, base);
      const int hi = min(end, base + rows);
      // This warp's first row at or after lo: rows begin + warp + kWarps·t.
      int j = lo + ((warp - (lo - begin)) % kWarps + kWarps) % kWarps;
      for (; j < hi; j += kWarps) {
        const int64_t at = static_cast<int64_t>(j - base) * kv_stride + kvh * hd;
        const KV* k_row = static_cast<const KV*>(spans[i].k) + at;
        const KV* v_row = static_cast<const KV*>(spans[i].v) + at;
        float dot = 0.f;
        for (int e = 0; e < kPerLane; ++e) {
          const int d = lane + 32 * e;
          if (d < hd) dot += q[e] * Widen(k_row[d]);
        }
        const float s = WarpSum(dot) * a.scale;
        const float m_new = fmaxf(m, s);
        const float alpha = expf(m - m_new);  // 0 for the first row (m = −inf)
        const float p = expf(s - m_new);
        l = l * alpha + p;
        for (int e = 0; e < kPerLane; ++e) {
          const int d = lane + 32 * e;
          if (d < hd) acc[e] = acc[e] * alpha + p * Widen(v_row[d]);
        }
        m = m_new;
      }
      base += rows;
    }
  }
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    if (d < hd) warp_o[warp * kMaxDecodeHeadDim + d] = acc[e];
  }
  __syncthreads();
  // The block's state: M = max m_w, L = Σ l_w·exp(m_w − M), O = Σ o_w·exp(m_w − M), warps in
  // order. A warp without rows has m_w = −inf and weighs 0.
  float mx = -INFINITY;
  for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, warp_m[w]);
  float weight[kWarps];
  float sum = 0.f;
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = warp_m[w] == -INFINITY ? 0.f : expf(warp_m[w] - mx);
    sum += warp_l[w] * weight[w];
  }
  const int64_t part = (static_cast<int64_t>(seq) * a.n_heads + h) * gridDim.z + slice;
  for (int d = threadIdx.x; d < hd; d += kThreads) {
    float o = 0.f;
    for (int w = 0; w < kWarps; ++w) o += warp_o[w * kMaxDecodeHeadDim + d] * weight[w];
    if (gridDim.z == 1) {
      a.out[q_row + d] = sum > 0.f ? o / sum : 0.f;
    } else {
      part_o[part * hd + d] = o;
    }
  }
  if (gridDim.z > 1 && threadIdx.x == 0) {
    part_ml[2 * part] = mx;
    part_ml[2 * part + 1] = sum;
  }
}

// Block = (query head, sequence): out = Σ_z o_z·exp(m_z − M) / Σ_z l_z·exp(m_z − M) over the
// slices in order, M = max m_z; a slice without rows (m_z = −inf) weighs 0.
__global__ __launch_bounds__(kThreads) void DecodeAttentionCombineKernel(const float* part_o,
                                                                         const float* part_ml,
                                                                         int n_slices, int n_heads,
                                                                         int hd, float* out) {
  const int h = blockIdx.x;
  const int seq = blockIdx.y;
  const int64_t first = (static_cast<int64_t>(seq) * n_heads + h) * n_slices;
  float mx = -INFINITY;
  for (int z = 0; z < n_slices; ++z) mx = fmaxf(mx, part_ml[2 * (first + z)]);
  float sum = 0.f;
  for (int z = 0; z < n_slices; ++z) {
    const float m = part_ml[2 * (first + z)];
    if (m != -INFINITY) sum += part_ml[2 * (first + z) + 1] * expf(m - mx);
  }
  const int64_t q_row = (static_cast<int64_t>(seq) * n_heads + h) * hd;
  for (int d = threadIdx.x; d < hd; d += kThreads) {
    float o = 0.f;
    for (int z = 0; z < n_slices; ++z) {
      const float m = part_ml[2 * (first + z)];
      if (m != -INFINITY) o += part_o[(first + z) * hd + d] * expf(m - mx);
    }
    out[q_row + d] = sum > 0.f ? o / sum : 0.f;
  }
}

}  // namespace

int DecodeAttentionSlices(int max_rows) {
  if (max_rows <= kDecodeRowsPerSplit) return 1;
  const int pieces = (max_rows + kDecodeRowsPerSplit - 1) / kDecodeRowsPerSplit;
  return pieces < kMaxDecodeSlices ? pieces : kMaxDecodeSlices;
}

size_t DecodeAttentionPartBytes(const DecodeAttentionArgs& a) {
  const int slices = DecodeAttentionSlices(a.max_rows);
  if (slices == 1) return 0;
  const size_t parts = static_cast<size_t>(a.n_seqs) * a.n_heads * slices;
  return sizeof(float) * parts * (a.head_dim + 2);
}

KernelStatus DecodeAttention(const DecodeAttentionArgs& a, void* parts, Stream stream) {
  if (a.q == nullptr || a.out == nullptr || a.spans == nullptr || a.n_spans <= 0) {
    return KernelStatus::Error("DecodeAttention: null q, out or spans, or no span");
  }
  if (a.n_seqs < 1 || a.n_seqs > 65535 || (a.n_seqs > 1 && a.span_begin == nullptr)) {
    return KernelStatus::Error("DecodeAttention: " + std::to_string(a.n_seqs) +
                               " sequences (1 to 65535; span_begin needed for more than one)");
  }
  if (a.n_heads <= 0 || a.n_kv_heads <= 0 || a.head_dim <= 0 || a.n_heads % a.n_kv_heads != 0 ||
      a.head_dim > kMaxDecodeHeadDim) {
    return KernelStatus::Error("DecodeAttention: bad shape heads=" + std::to_string(a.n_heads) +
                               " kv_heads=" + std::to_string(a.n_kv_heads) +
                               " head_dim=" + std::to_string(a.head_dim) + " (at most " +
                               std::to_string(kMaxDecodeHeadDim) + ")");
  }
  if (a.kv_dtype != DType::kF32 && a.kv_dtype != DType::kBF16) {
    return KernelStatus::Error("DecodeAttention: KV dtype must be F32 or BF16");
  }
  const int slices = DecodeAttentionSlices(a.max_rows);
  if (slices > 1 && parts == nullptr) {
    return KernelStatus::Error("DecodeAttention: no room for the slices' partial results");
  }
  float* part_o = static_cast<float*>(parts);
  float* part_ml = slices > 1
                       ? part_o + static_cast<size_t>(a.n_seqs) * a.n_heads * slices * a.head_dim
                       : nullptr;
  const dim3 grid(a.n_heads, a.n_seqs, slices);
  KernelStatus st = a.kv_dtype == DType::kF32
                        ? Launch("DecodeAttentionSplitKernel", DecodeAttentionSplitKernel<float>,
                                 grid, dim3(kThreads), 0, stream, a, part_o, part_ml)
                        : Launch("DecodeAttentionSplitKernel", DecodeAttentionSplitKernel<uint16_t>,
                                 grid, dim3(kThreads), 0, stream, a, part_o, part_ml);
  if (!st.ok || slices == 1) return st;
  return Launch("DecodeAttentionCombineKernel", DecodeAttentionCombineKernel,
                dim3(a.n_heads, a.n_seqs), dim3(kThreads), 0, stream,
                static_cast<const float*>(part_o), static_cast<const float*>(part_ml), slices,
                a.n_heads, a.head_dim, a.out);
}

}  // namespace hap::cuda
