#include "kernels/cuda/attention.h"

#include <string>

#include "kernels/cuda/device.cuh"

// Fully unrolled loops over a thread's output elements keep acc[] in registers on the GPU (nvcc
// otherwise leaves it in local memory). GCC would warn on the unknown pragma.
#if !defined(HAP_UNROLL)
#if defined(__CUDACC__)
#define HAP_UNROLL _Pragma("unroll")
#else
#define HAP_UNROLL
#endif
#endif

namespace hap::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kQueryTile = 16;  // query rows per block
// Output elements [kQueryTile, head_dim] spread over the block: at most this many per thread.
constexpr int kMaxOutPerThread = kQueryTile * kMaxAttentionHeadDim / kThreads;
// What a block may use without opting in to more (the emulation enforces the same limit).
constexpr size_t kMaxSharedBytes = 48 * 1024;

// Row stride of the K tile in shared memory: odd, so the 32 lanes reading the same element of
// 32 consecutive keys hit 32 different banks.
__host__ __device__ __forceinline__ int KeyStride(int head_dim) { return head_dim | 1; }

// Dynamic shared memory of a block: Q [kQueryTile, hd], K [kv_tile, KeyStride(hd)],
// V [kv_tile, hd], scores/probabilities [kQueryTile, kv_tile].
size_t SharedBytes(int head_dim, int kv_tile) {
  return sizeof(float) * (static_cast<size_t>(kQueryTile) * head_dim +
                          static_cast<size_t>(kv_tile) * (KeyStride(head_dim) + head_dim) +
                          static_cast<size_t>(kQueryTile) * kv_tile);
}

// Block (x = query tile, y = head). Per key tile: load K and V, scores s[r, c] = scale · q_r·k_c
// (-inf where row r may not see key c), then thread r < kQueryTile folds its row into the running
// max m_r and sum l_r (p = exp(s − m_new), previous terms scaled by α = exp(m_old − m_new)), then
// every thread updates its output elements o[r, d] = α_r · o[r, d] + Σ_c p[r, c] · v[c, d].
__global__ __launch_bounds__(kThreads) void AttentionKernel(AttentionArgs a, int kv_tile) {
  HAP_SHARED(float, row_scale, kQueryTile);  // α_r per tile, then 1 / l_r at the end
  HAP_DYNAMIC_SHARED(float, smem);
  const int hd = a.head_dim;
  const int ks = KeyStride(hd);
  float* q_tile = smem;                      // F32 [kQueryTile, hd]
  float* k_tile = q_tile + kQueryTile * hd;  // F32 [kv_tile, ks]
  float* v_tile = k_tile + kv_tile * ks;     // F32 [kv_tile, hd]
  float* s_tile = v_tile + kv_tile * hd;     // F32 [kQueryTile, kv_tile]

  const int tid = threadIdx.x;
  const int h = blockIdx.y;
  const int kvh = h / (a.n_heads / a.n_kv_heads);
  const int r0 = blockIdx.x * kQueryTile;
  const int rows = min(kQueryTile, a.n_q - r0);
  const int64_t q_stride = static_cast<int64_t>(a.n_heads) * hd;
  const int64_t kv_stride = static_cast<int64_t>(a.n_kv_heads) * hd;
  const float* q = a.q + r0 * q_stride + h * hd;
  const float* k = a.k + kvh * hd;
  const float* v = a.v + kvh * hd;

  // Rows past n_q are zeros: they see no key and are never written.
  for (int i = tid; i < kQueryTile * hd; i += kThreads) {
    const int r = i / hd;
    q_tile[i] = r < rows ? q[r * q_stride + (i - r * hd)] : 0.f;
  }
  // Keys past the causal limit of the tile's last row are never needed.
  const int n_keys = a.causal ? min(a.n_kv, a.causal_offset + r0 + rows) : a.n_kv;
  const int n_out = kQueryTile * hd;

  float m = -INFINITY;  // row tid's running max (threads < kQueryTile)
  float l = 0.f;        // row tid's running Σ exp(s − m)
  float acc[kMaxOutPerThread];
  HAP_UNROLL
  for (int e = 0; e < kMaxOutPerThread; ++e) acc[e] = 0.f;

  for (int j0 = 0; j0 < n_keys; j0 += kv_tile) {
    __syncthreads();  // the previous tile's K, V, P and α are read; Q is written
    // Keys past n_keys are zeros: their probability is 0, and 0 · v must not be NaN.
    for (int i = tid; i < kv_tile * hd; i += kThreads) {
      const int c = i / hd;
      const int d = i - c * hd;
      const int64_t j = j0 + c;
      const bool in = j0 + c < n_keys;
      k_tile[c * ks + d] = in ? k[j * kv_stride + d] : 0.f;
      v_tile[i] = in ? v[j * kv_stride + d] : 0.f;
    }
    __syncthreads();
    for (int i = tid; i < kQueryTile * kv_tile; i += kThreads) {
      const int r = i / kv_tile;
      const int c = i - r * kv_tile;
      const int j = j0 + c;
      float s = -INFINITY;
      if (r < rows && j < n_keys && (!a.causal || j <= a.causal_offset + r0 + r)) {
        const float* qr = q_tile + r * hd;
        const float* kc = k_tile + c * ks;
        float dot = 0.f;
        for (int t = 0; t < hd; ++t) dot += qr[t] * kc[t];
        s = dot * a.scale;
      }
      s_tile[i] = s;
    }
    __syncthreads();
    if (tid < kQueryTile) {
      float* p = s_tile + tid * kv_tile;
      float mx = m;
      for (int c = 0; c < kv_tile; ++c) mx = fmaxf(mx, p[c]);
      // mx stays -inf only for a row past n_q: every real row sees key 0, in the first tile.
      const bool none = mx == -INFINITY;
      const float alpha = none ? 1.f : expf(m - mx);
      float sum = 0.f;
      for (int c = 0; c < kv_tile; ++c) {
        p[c] = none ? 0.f : expf(p[c] - mx);
        sum += p[c];
      }
      l = l * alpha + sum;
      m = mx;
      row_scale[tid] = alpha;
    }
    __syncthreads();
    HAP_UNROLL
    for (int e = 0; e < kMaxOutPerThread; ++e) {
      const int i = tid + e * kThreads;
      if (i < n_out) {
        const int r = i / hd;
        const int d = i - r * hd;
        const float* p = s_tile + r * kv_tile;
        float o = acc[e] * row_scale[r];
        for (int c = 0; c < kv_tile; ++c) o += p[c] * v_tile[c * hd + d];
        acc[e] = o;
      }
    }
  }
  __syncthreads();  // the last tile's α is read
  if (tid < kQueryTile) {
    row_scale[tid] = l > 0.f ? 1.f / l : 0.f;
    if (a.lse != nullptr && tid < rows) {
      a.lse[static_cast<int64_t>(h) * a.n_q + r0 + tid] = m + logf(l);
    }
  }
  __syncthreads();
  float* out = a.out + r0 * q_stride + h * hd;
  HAP_UNROLL
  for (int e = 0; e < kMaxOutPerThread; ++e) {
    const int i = tid + e * kThreads;
    const int r = i / hd;
    if (i < n_out && r < rows) out[r * q_stride + (i - r * hd)] = acc[e] * row_scale[r];
  }
}

}  // namespace

KernelStatus Attention(const AttentionArgs& a, Stream stream) {
  if (a.q == nullptr || a.k == nullptr || a.v == nullptr || a.out == nullptr) {
    return KernelStatus::Error("Attention: null q, k, v or out");
  }
  if (a.n_q < 0 || a.n_kv <= 0 || a.n_heads <= 0 || a.n_kv_heads <= 0 || a.head_dim <= 0 ||
      a.n_heads % a.n_kv_heads != 0 || a.head_dim > kMaxAttentionHeadDim) {
    return KernelStatus::Error(
        "Attention: bad shape n_q=" + std::to_string(a.n_q) + " n_kv=" + std::to_string(a.n_kv) +
        " heads=" + std::to_string(a.n_heads) + " kv_heads=" + std::to_string(a.n_kv_heads) +
        " head_dim=" + std::to_string(a.head_dim) + " (at most " +
        std::to_string(kMaxAttentionHeadDim) + ")");
  }
  if (a.causal && (a.causal_offset < 0 || int64_t{a.causal_offset} + a.n_q > a.n_kv)) {
    return KernelStatus::Error("Attention: causal offset " + std::to_string(a.causal_offset) +
                               " with " + std::to_string(a.n_q) + " queries exceeds " +
                               std::to_string(a.n_kv) + " keys");
  }
  if (a.n_heads > 65535) return KernelStatus::Error("Attention: more than 65535 heads");
  if (a.n_q == 0) return KernelStatus::Ok();
  // The widest key tile that fits: 32 keys (one per lane) up to head_dim 136, fewer beyond.
  int kv_tile = 32;
  while (SharedBytes(a.head_dim, kv_tile) > kMaxSharedBytes) kv_tile /= 2;
  return Launch("AttentionKernel", AttentionKernel, dim3(CeilDiv(a.n_q, kQueryTile), a.n_heads),
                dim3(kThreads), SharedBytes(a.head_dim, kv_tile), stream, a, kv_tile);
}

}  // namespace hap::cuda
