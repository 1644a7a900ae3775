#include "kernels/cuda/decode_attention.h"

#include <string>

#include "kernels/cuda/device.cuh"

namespace hap::cuda {
namespace {

constexpr int kThreads = 128;  // also the rows per chunk: one per thread
constexpr int kMaxOutPerThread = (kMaxDecodeHeadDim + kThreads - 1) / kThreads;

__device__ __forceinline__ float Widen(float x) { return x; }
// BF16 is the top half of an F32: widening is exact.
__device__ __forceinline__ float Widen(uint16_t bits) {
  return __uint_as_float(static_cast<unsigned>(bits) << 16);
}

// Block = (query head h, sequence blockIdx.y). Per chunk of kThreads rows: thread i scores row c0 + i
// (s = scale · q·k, -inf past the last row), every thread takes the chunk max m_new and its own
// row's p = exp(s − m_new), then every thread folds the chunk into the running sum
// l = α·l + Σ p and its output elements o[d] = α·o[d] + Σ_c p_c · v_c[d], α = exp(m_old − m_new).
// Each thread sums the same values in the same order, so l and m agree across threads.
template <typename KV>
__global__ __launch_bounds__(kThreads) void DecodeAttentionKernel(DecodeAttentionArgs a) {
  HAP_SHARED(float, q_head, kMaxDecodeHeadDim);  // F32 [head_dim]
  HAP_SHARED(float, scores, kThreads);           // the chunk's s
  HAP_SHARED(float, probs, kThreads);            // the chunk's p = exp(s − m_new)
  HAP_SHARED(const KV*, v_rows, kThreads);       // the chunk's value rows (head kvh)
  const int hd = a.head_dim;
  const int tid = threadIdx.x;
  const int h = blockIdx.x;
  const int seq = blockIdx.y;
  const int kvh = h / (a.n_heads / a.n_kv_heads);
  const int64_t kv_stride = static_cast<int64_t>(a.n_kv_heads) * hd;
  // This sequence's query, output and spans (span_begin is a device copy of the host table).
  const int64_t q_row = static_cast<int64_t>(seq) * a.n_heads * hd;
  const int first_span = a.span_begin != nullptr ? a.span_begin[seq] : 0;
  const int n_spans = a.span_begin != nullptr ? a.span_begin[seq + 1] - first_span : a.n_spans;
  const KvSpan* spans = a.spans + first_span;
  for (int t = tid; t < hd; t += kThreads) {
    q_head[t] = a.q[q_row + static_cast<int64_t>(h) * hd + t];
  }

  // Every thread counts the rows itself: the chunk loop's bound is then the same in all of them.
  int n_rows = 0;
  for (int i = 0; i < n_spans; ++i) n_rows += max(spans[i].rows, 0);
  // This thread's row: row `offset` of span `span` (span == n_spans once past the last row).
  int span = 0;
  int offset = tid;

  float m = -INFINITY;
  float l = 0.f;
  float acc[kMaxOutPerThread];
  for (int e = 0; e < kMaxOutPerThread; ++e) acc[e] = 0.f;

  __syncthreads();  // q_head
  for (int c0 = 0; c0 < n_rows; c0 += kThreads, offset += kThreads) {
    while (span < n_spans && offset >= max(spans[span].rows, 0)) {
      offset -= max(spans[span].rows, 0);
      ++span;
    }
    float s = -INFINITY;
    const KV* v_row = nullptr;
    if (span < n_spans) {
      const int64_t at = offset * kv_stride + kvh * hd;
      const KV* k_row = static_cast<const KV*>(spans[span].k) + at;
      v_row = static_cast<const KV*>(spans[span].v) + at;
      float dot = 0.f;
      for (int t = 0; t < hd; ++t) dot += q_head[t] * Widen(k_row[t]);
      s = dot * a.scale;
    }
    scores[tid] = s;
    __syncthreads();
    // Row c0 exists, so the chunk max is finite; exp(-inf − mx) = 0 for the rows past the end.
    float mx = m;
    for (int c = 0; c < kThreads; ++c) mx = fmaxf(mx, scores[c]);
    const float alpha = expf(m - mx);
    // Written after the barrier above, so no thread still reads the previous chunk's entries.
    probs[tid] = expf(s - mx);
    v_rows[tid] = v_row;
    __syncthreads();
    const int n = min(kThreads, n_rows - c0);
    float sum = 0.f;
    for (int c = 0; c < n; ++c) sum += probs[c];
    l = l * alpha + sum;
    m = mx;
    for (int e = 0; e < kMaxOutPerThread; ++e) {
      const int d = tid + e * kThreads;
      if (d < hd) {
        float o = acc[e] * alpha;
        for (int c = 0; c < n; ++c) o += probs[c] * Widen(v_rows[c][d]);
        acc[e] = o;
      }
    }
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
  for (int e = 0; e < kMaxOutPerThread; ++e) {
    const int d = tid + e * kThreads;
    if (d < hd) a.out[q_row + static_cast<int64_t>(h) * hd + d] = acc[e] * inv;
  }
}

}  // namespace

KernelStatus DecodeAttention(const DecodeAttentionArgs& a, Stream stream) {
  if (a.q == nullptr || a.out == nullptr || a.spans == nullptr || a.n_spans <= 0) {
    return KernelStatus::Error("DecodeAttention: null q, out or spans, or no span");
  }
  if (a.n_seqs < 1 || a.n_seqs > 65535 || (a.n_seqs > 1 && a.span_begin == nullptr)) {
    return KernelStatus::Error("DecodeAttention: " + std::to_string(a.n_seqs) +
                               " sequences (1 to 65535; span_begin needed for more than one)");
  }
  const dim3 grid(a.n_heads, a.n_seqs);
  if (a.n_heads <= 0 || a.n_kv_heads <= 0 || a.head_dim <= 0 || a.n_heads % a.n_kv_heads != 0 ||
      a.head_dim > kMaxDecodeHeadDim) {
    return KernelStatus::Error("DecodeAttention: bad shape heads=" + std::to_string(a.n_heads) +
                               " kv_heads=" + std::to_string(a.n_kv_heads) +
                               " head_dim=" + std::to_string(a.head_dim) + " (at most " +
                               std::to_string(kMaxDecodeHeadDim) + ")");
  }
  switch (a.kv_dtype) {
    case DType::kF32:
      return Launch("DecodeAttentionKernel", DecodeAttentionKernel<float>, grid,
                    dim3(kThreads), 0, stream, a);
    case DType::kBF16:
      return Launch("DecodeAttentionKernel", DecodeAttentionKernel<uint16_t>, grid,
                    dim3(kThreads), 0, stream, a);
    default:
      return KernelStatus::Error("DecodeAttention: KV dtype must be F32 or BF16");
  }
}

}  // namespace hap::cuda
