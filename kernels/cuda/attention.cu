#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/device.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/rope.cuh"

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

// The keys [*lo, *hi) query row `row` sees by its segment: every key without segments. A row past
// n_q takes the last row's segment, so padding rows see keys as real ones do. Bounds are clamped
// to [0, n_kv], so bad ones cannot make a kernel read past the keys.
__device__ __forceinline__ void SegmentKeys(const AttentionArgs& a, int row, int* lo, int* hi) {
  if (a.n_segments <= 0) {
    *lo = 0;
    *hi = a.n_kv;
    return;
  }
  row = min(row, a.n_q - 1);
  // The last s with bounds[s] <= row (empty segments before it are passed over).
  int first = 0, count = a.n_segments;
  while (count > 0) {
    const int half = count / 2;
    if (a.segment_bounds[first + half + 1] <= row) {
      first += half + 1;
      count -= half + 1;
    } else {
      count = half;
    }
  }
  *lo = max(0, min(a.segment_bounds[first], a.n_kv));
  *hi = max(*lo, min(a.segment_bounds[first + 1], a.n_kv));
}

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
  HAP_SHARED(int, seg_lo, kQueryTile);       // the keys [seg_lo[r], seg_hi[r]) row r may see
  HAP_SHARED(int, seg_hi, kQueryTile);
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
  if (tid < kQueryTile) SegmentKeys(a, r0 + tid, &seg_lo[tid], &seg_hi[tid]);
  __syncthreads();
  // Segments rise with the rows: the tile's keys run from its first row's first key to its last
  // row's last, and keys past the causal limit of the last row are never needed.
  const int first_key = seg_lo[0];
  const int n_keys =
      a.causal ? min(seg_hi[rows - 1], a.causal_offset + r0 + rows) : seg_hi[rows - 1];
  const int n_out = kQueryTile * hd;

  float m = -INFINITY;  // row tid's running max (threads < kQueryTile)
  float l = 0.f;        // row tid's running Σ exp(s − m)
  float acc[kMaxOutPerThread];
  HAP_UNROLL
  for (int e = 0; e < kMaxOutPerThread; ++e) acc[e] = 0.f;

  for (int j0 = first_key; j0 < n_keys; j0 += kv_tile) {
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
      if (r < rows && j < n_keys && j >= seg_lo[r] && j < seg_hi[r] &&
          (!a.causal || j <= a.causal_offset + r0 + r)) {
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
      // mx stays -inf for a row past n_q, and for a row whose segment starts after this tile.
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

constexpr int kSoftmaxThreads = 128;

// Block (x = row of the chunk, y = head) of the narrow path: the row's scores s F32 [n_keys]
// (scale applied) → p = exp(s − max) / Σ rounded to `type` over the keys the row sees, 0 past
// them, and the row's log-sum-exp.
__global__ __launch_bounds__(kSoftmaxThreads) void ChunkSoftmaxKernel(AttentionArgs a,
                                                                      const float* scores,
                                                                      uint16_t* probs, int rows,
                                                                      int n_keys, int r0,
                                                                      ElemType type) {
  HAP_SHARED(float, scratch, 32);
  const int r = blockIdx.x;
  const int h = blockIdx.y;
  const int64_t at = (static_cast<int64_t>(h) * rows + r) * n_keys;
  const float* s = scores + at;
  uint16_t* p = probs + at;
  int first = 0, end = n_keys;
  SegmentKeys(a, r0 + r, &first, &end);
  int limit = min(end, n_keys);
  if (a.causal) limit = min(limit, a.causal_offset + r0 + r + 1);
  float mx = -INFINITY;
  for (int j = first + threadIdx.x; j < limit; j += kSoftmaxThreads) mx = fmaxf(mx, s[j]);
  mx = BlockMax(mx, scratch);
  float sum = 0.f;
  for (int j = first + threadIdx.x; j < limit; j += kSoftmaxThreads) sum += expf(s[j] - mx);
  sum = BlockSum(sum, scratch);
  const float inv = 1.f / sum;
  for (int j = threadIdx.x; j < n_keys; j += kSoftmaxThreads) {
    const float v = j >= first && j < limit ? expf(s[j] - mx) * inv : 0.f;
    p[j] = type == ElemType::kBF16 ? F32ToBf16(v) : F32ToF16(v);
  }
  if (threadIdx.x == 0 && a.lse != nullptr) {
    a.lse[static_cast<int64_t>(h) * a.n_q + r0 + r] = mx + logf(sum);
  }
}

// q, k and v rounded to `type` in one launch: blockIdx.y picks the array.
struct QkvRounding {
  const float* x[3];
  uint16_t* out[3];
  int64_t n[3];
};
__global__ void RoundQkvKernel(QkvRounding r, ElemType type) {
  const int a = blockIdx.y;
  const float* x = r.x[a];
  uint16_t* out = r.out[a];
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < r.n[a];
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = type == ElemType::kBF16 ? F32ToBf16(x[i]) : F32ToF16(x[i]);
  }
}

size_t Align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Query rows per chunk of the narrow path: the chunk's scores and probabilities fit in
// chunk_bytes (at least one row).
int ChunkRows(const AttentionArgs& a, int64_t chunk_bytes) {
  const int64_t per_row = int64_t{a.n_heads} * a.n_kv * (sizeof(float) + sizeof(uint16_t));
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(a.n_q, chunk_bytes / per_row)));
}

KernelStatus CheckArgs(const AttentionArgs& a) {
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
  if (const char* error = a.SegmentError(); *error != 0) return KernelStatus::Error(error);
  return KernelStatus::Ok();
}

// The workspace of the narrow path: q, k, v rounded, then one chunk's scores and probabilities.
struct NarrowLayout {
  size_t q, k, v, scores, probs, bytes;
};
NarrowLayout LayoutOf(const AttentionArgs& a, int64_t chunk_bytes) {
  NarrowLayout l{};
  const size_t q_bytes = sizeof(uint16_t) * a.n_q * a.n_heads * a.head_dim;
  const size_t kv_bytes = sizeof(uint16_t) * a.n_kv * a.n_kv_heads * a.head_dim;
  const size_t chunk = static_cast<size_t>(ChunkRows(a, chunk_bytes)) * a.n_heads * a.n_kv;
  l.q = 0;
  l.k = l.q + Align256(q_bytes);
  l.v = l.k + Align256(kv_bytes);
  l.scores = l.v + Align256(kv_bytes);
  l.probs = l.scores + Align256(sizeof(float) * chunk);
  l.bytes = l.probs + Align256(sizeof(uint16_t) * chunk);
  return l;
}

}  // namespace

size_t NarrowAttentionWorkspaceBytes(const AttentionArgs& a, int64_t chunk_bytes) {
  return CheckArgs(a).ok && a.n_q > 0 ? LayoutOf(a, chunk_bytes).bytes : 0;
}

KernelStatus NarrowAttention(const AttentionArgs& a, ElemType type, Gemm& gemm, void* workspace,
                             int64_t chunk_bytes) {
  KernelStatus st = CheckArgs(a);
  if (!st.ok) return st;
  if (type == ElemType::kF32) {
    return KernelStatus::Error("NarrowAttention: the operands must be BF16 or F16");
  }
  if (a.n_q == 0) return KernelStatus::Ok();
  if (workspace == nullptr) return KernelStatus::Error("NarrowAttention: no workspace");
  const Stream stream = gemm.stream();
  const NarrowLayout l = LayoutOf(a, chunk_bytes);
  char* ws = static_cast<char*>(workspace);
  auto* q = reinterpret_cast<uint16_t*>(ws + l.q);
  auto* k = reinterpret_cast<uint16_t*>(ws + l.k);
  auto* v = reinterpret_cast<uint16_t*>(ws + l.v);
  auto* scores = reinterpret_cast<float*>(ws + l.scores);
  auto* probs = reinterpret_cast<uint16_t*>(ws + l.probs);
  const int hd = a.head_dim;
  const int64_t q_stride = int64_t{a.n_heads} * hd;
  const int64_t kv_stride = int64_t{a.n_kv_heads} * hd;
  const int group = a.n_heads / a.n_kv_heads;
  const QkvRounding rounding{
      {a.q, a.k, a.v}, {q, k, v}, {a.n_q * q_stride, a.n_kv * kv_stride, a.n_kv * kv_stride}};
  const int64_t longest = std::max(rounding.n[0], rounding.n[1]);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(CeilDiv(longest, 256), 2048));
  st = Launch("RoundQkvKernel", RoundQkvKernel, dim3(blocks, 3), dim3(256), 0, stream, rounding,
              type);
  if (!st.ok) return st;
  const int chunk = ChunkRows(a, chunk_bytes);
  for (int r0 = 0; r0 < a.n_q; r0 += chunk) {
    const int rows = std::min(chunk, a.n_q - r0);
    // Keys past the causal limit of the chunk's last row are never needed.
    const int n_keys = a.causal ? std::min(a.n_kv, a.causal_offset + r0 + rows) : a.n_kv;
    const int64_t head_block = int64_t{rows} * n_keys;  // one head's scores in the chunk
    // Query head h = g·group + i reads kv head g: one batched product per i, over g.
    for (int i = 0; i < group; ++i) {
      st = gemm.BatchedProduct(type, /*b_transposed=*/true, rows, n_keys, hd, a.scale,
                               q + r0 * q_stride + i * hd, q_stride, group * hd, k, kv_stride, hd,
                               scores + i * head_block, n_keys, group * head_block, a.n_kv_heads);
      if (!st.ok) return st;
    }
    st = Launch("ChunkSoftmaxKernel", ChunkSoftmaxKernel, dim3(rows, a.n_heads),
                dim3(kSoftmaxThreads), 0, stream, a, scores, probs, rows, n_keys, r0, type);
    if (!st.ok) return st;
    for (int i = 0; i < group; ++i) {
      st = gemm.BatchedProduct(type, /*b_transposed=*/false, rows, hd, n_keys, 1.f,
                               probs + i * head_block, n_keys, group * head_block, v, kv_stride, hd,
                               a.out + r0 * q_stride + i * hd, q_stride, group * hd, a.n_kv_heads);
      if (!st.ok) return st;
    }
  }
  return KernelStatus::Ok();
}

namespace {

// FlashAttention's tiles: 64 query rows per block, 16 per warp (one m16 fragment row block); keys
// 64 at a time in shared memory, rows padded by 8 elements against bank conflicts.
constexpr int kFlashThreads = 128;
constexpr int kFlashRows = 64;
constexpr int kFlashKeys = 64;
constexpr int kFlashPad = 8;
static_assert(kAttentionRunAlign % kFlashRows == 0 && kAttentionRunAlign % kFlashKeys == 0 &&
              kAttentionRunAlign % kQueryTile == 0);

// Four F32 values and four 16-bit ones: the tile loads' units (16 and 8 bytes).
struct alignas(16) Floats4 {
  float x, y, z, w;
};
struct alignas(8) Halves4 {
  uint32_t lo, hi;
};

// Key `key` of a head, elements [c, c + 4), as 16-byte loads (zero past n_kv).
__device__ __forceinline__ Floats4 LoadFour(const float* src, int64_t stride, int key, int n_kv,
                                            int c) {
  if (key >= n_kv) return Floats4{0.f, 0.f, 0.f, 0.f};
  return *reinterpret_cast<const Floats4*>(src + key * stride + c);
}

// RopeCosSin out of line: the rare path of RopeAt, kept out of the loops that call it (its F64
// power and sine would otherwise be inlined at every one of them).
__device__ HAP_NOINLINE void RopeCosSinOutOfLine(int position, int i, int head_dim, float theta,
                                                 float* cs, float* sn) {
  RopeCosSin(position, i, head_dim, theta, cs, sn);
}

// cos and sin of pair i at `position` (FlashRopeArgs): the table's entry, or outside the table
// computed as Rope computes it.
__device__ __forceinline__ void RopeAt(const FlashRopeArgs& rope, int position, int i, int head_dim,
                                       float* cs, float* sn) {
  if (position >= 0 && position < rope.table_positions) {
    const int64_t at = static_cast<int64_t>(position) * (head_dim / 2) + i;
    *cs = rope.cos_table[at];
    *sn = rope.sin_table[at];
  } else {
    RopeCosSinOutOfLine(position, i, head_dim, rope.theta, cs, sn);
  }
}

// Pairs (c + u, c + u + half) for u < 4 of a head at `position`, a = elements [c, c + 4) and
// b = [c + half, c + half + 4), rotated in place.
__device__ __forceinline__ void RotateFour(const FlashRopeArgs& rope, int position, int c,
                                           int head_dim, Floats4& a, Floats4& b) {
  float* x = &a.x;
  float* y = &b.x;
  HAP_UNROLL
  for (int u = 0; u < 4; ++u) {
    float cs, sn;
    RopeAt(rope, position, c + u, head_dim, &cs, &sn);
    const float first = RotatedFirst(x[u], y[u], cs, sn);
    y[u] = RotatedSecond(x[u], y[u], cs, sn);
    x[u] = first;
  }
}

__device__ __forceinline__ void StoreRounded(uint16_t* dst, const Floats4& v, bool bf16) {
  *reinterpret_cast<Halves4*>(dst) = bf16 ? Halves4{PackHalves(F32ToBf16(v.x), F32ToBf16(v.y)),
                                                    PackHalves(F32ToBf16(v.z), F32ToBf16(v.w))}
                                          : Halves4{PackHalves(F32ToF16(v.x), F32ToF16(v.y)),
                                                    PackHalves(F32ToF16(v.z), F32ToF16(v.w))};
}

// Keys [key0, key0 + kFlashKeys) of one head of k (F32, rows `stride` apart, `src` at the head's
// first element), rounded into `dst` [kFlashKeys, D + kFlashPad]: a score fragment's B register
// is then two consecutive elements of one key. All loads of a thread are issued back to back.
// kRope: each key rotated first at its position (a thread loads both halves of its pairs).
template <bool kBf16, int kSteps, bool kRope, int kThreadsUsed>
__device__ void LoadKeyTile(const float* src, int64_t stride, int key0, int n_kv, uint16_t* dst,
                            const FlashRopeArgs& rope) {
  constexpr int kDim = kSteps * 16, kRow = kDim + kFlashPad;
  if constexpr (kRope) {
    constexpr int kHalf = kDim / 2, kQuads = kFlashKeys * kHalf / 4;
    HAP_UNROLL
    for (int i = threadIdx.x; i < kQuads; i += kThreadsUsed) {
      const int r = i / (kHalf / 4), c = (i % (kHalf / 4)) * 4, key = key0 + r;
      Floats4 a = LoadFour(src, stride, key, n_kv, c);
      Floats4 b = LoadFour(src, stride, key, n_kv, c + kHalf);
      RotateFour(rope, key < n_kv ? rope.positions[key] : 0, c, kDim, a, b);
      StoreRounded(dst + r * kRow + c, a, kBf16);
      StoreRounded(dst + r * kRow + c + kHalf, b, kBf16);
    }
  } else {
    constexpr int kQuads = kFlashKeys * kDim / 4;
    HAP_UNROLL
    for (int i = threadIdx.x; i < kQuads; i += kThreadsUsed) {
      const int r = i / (kDim / 4), c = (i % (kDim / 4)) * 4;
      StoreRounded(dst + r * kRow + c, LoadFour(src, stride, key0 + r, n_kv, c), kBf16);
    }
  }
}

// kRope: the keys of the block's own rows [row0, row0 + kFlashRows) of one kv head, k rotated
// and v as it is, into rope.k_out and rope.v_out (F32, the same layout as k and v).
template <int kSteps, int kThreadsUsed>
__device__ void StoreOwnKeys(const AttentionArgs& a, const FlashRopeArgs& rope, int kv_head,
                             int row0) {
  constexpr int kDim = kSteps * 16, kHalf = kDim / 2;
  const int64_t stride = int64_t{a.n_kv_heads} * kDim, head = int64_t{kv_head} * kDim;
  const int rows = min(kFlashRows, a.n_kv - row0);
  for (int i = threadIdx.x; i < rows * (kHalf / 4); i += kThreadsUsed) {
    const int r = i / (kHalf / 4), c = (i % (kHalf / 4)) * 4, key = row0 + r;
    Floats4 x = LoadFour(a.k + head, stride, key, a.n_kv, c);
    Floats4 y = LoadFour(a.k + head, stride, key, a.n_kv, c + kHalf);
    RotateFour(rope, rope.positions[key], c, kDim, x, y);
    *reinterpret_cast<Floats4*>(rope.k_out + key * stride + head + c) = x;
    *reinterpret_cast<Floats4*>(rope.k_out + key * stride + head + c + kHalf) = y;
  }
  for (int i = threadIdx.x; i < rows * (kDim / 4); i += kThreadsUsed) {
    const int r = i / (kDim / 4), c = (i % (kDim / 4)) * 4, key = row0 + r;
    *reinterpret_cast<Floats4*>(rope.v_out + key * stride + head + c) =
        LoadFour(a.v + head, stride, key, a.n_kv, c);
  }
}

// The same keys of v, rounded into `dst` as words of two keys: word [j][d] holds v[2j][d] (low)
// and v[2j + 1][d] (high), rows of D + kFlashPad words. A p·v fragment's B register (two
// consecutive keys of one element) is then one word, read without bank conflicts.
template <bool kBf16, int kSteps, int kThreadsUsed>
__device__ void LoadValueTile(const float* src, int64_t stride, int key0, int n_kv, uint32_t* dst) {
  constexpr int kDim = kSteps * 16, kRow = kDim + kFlashPad, kUnits = kFlashKeys / 2 * kDim / 4;
  HAP_UNROLL
  for (int i = threadIdx.x; i < kUnits; i += kThreadsUsed) {
    const int j = i / (kDim / 4), c = (i % (kDim / 4)) * 4;
    const Floats4 a = LoadFour(src, stride, key0 + 2 * j, n_kv, c);
    const Floats4 b = LoadFour(src, stride, key0 + 2 * j + 1, n_kv, c);
    uint32_t* w = dst + j * kRow + c;
    w[0] = PackHalves(RoundHalf<kBf16>(a.x), RoundHalf<kBf16>(b.x));
    w[1] = PackHalves(RoundHalf<kBf16>(a.y), RoundHalf<kBf16>(b.y));
    w[2] = PackHalves(RoundHalf<kBf16>(a.z), RoundHalf<kBf16>(b.z));
    w[3] = PackHalves(RoundHalf<kBf16>(a.w), RoundHalf<kBf16>(b.w));
  }
}

// s = scale · q·kᵀ of the warp's 16 rows against kTiles fragments of 8 keys from key0 (`ks` at
// key0's row of the tile: all 64 keys of it, or the share of the warp's key group), −inf where the
// row does not see the key (outside its segment's [key_lo, key_hi), which ends at n_kv without
// segments, or after it when causal).
template <bool kBf16, int kSteps, int kTiles>
__device__ void ScoreTile(const AttentionArgs& a, const uint32_t (&qa)[kSteps][4],
                          const uint16_t* ks, int key0, const int (&rows)[2],
                          const int (&key_lo)[2], const int (&key_hi)[2], float (&s)[kTiles][4]) {
  constexpr int kRow = kSteps * 16 + kFlashPad;
  const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  HAP_UNROLL
  for (int nt = 0; nt < kTiles; ++nt) {
    s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
  }
  HAP_UNROLL
  for (int st = 0; st < kSteps; ++st) {
    HAP_UNROLL
    for (int nt = 0; nt < kTiles; ++nt) {
      // B[d][key] = k[key][d]: two consecutive d of one key per register.
      const uint16_t* kr = ks + (nt * 8 + g) * kRow + st * 16 + 2 * t;
      const uint32_t b[2] = {*reinterpret_cast<const uint32_t*>(kr),
                             *reinterpret_cast<const uint32_t*>(kr + 8)};
      Mma16816<kBf16>(s[nt], qa[st], b);
    }
  }
  HAP_UNROLL
  for (int nt = 0; nt < kTiles; ++nt) {
    HAP_UNROLL
    for (int i = 0; i < 4; ++i) {
      const int key = key0 + nt * 8 + 2 * t + (i & 1), row = rows[i >> 1];
      const bool seen = key >= key_lo[i >> 1] && key < key_hi[i >> 1] &&
                        (!a.causal || key <= a.causal_offset + row);
      s[nt][i] = seen ? s[nt][i] * a.scale : -INFINITY;
    }
  }
}

// Block (x = tile of 64 query rows, y = head): kGroups key groups of 4 warps, warp w taking rows
// 16·(w % 4) of the tile against key group w / 4, the (w / 4)-th of kGroups equal shares of every
// key tile. Two passes over the keys the tile sees, on tensor cores (Mma16816): the first finds
// each row's max and Σ exp (online), the second recomputes the scores, rounds p = exp(s − max) / Σ
// to the operand type — the normalised probabilities the reference rounds — and accumulates p·v
// in F32. q, k and v are rounded as they are loaded (no rounded copies in memory); the scores
// never leave registers. With kGroups > 1 the groups' maxima and sums are joined between the
// passes (each group's sum scaled to the row's max, added in group order), and their p·v after
// the second, group by group from the last, in the tiles' shared memory; group 0 writes the rows.
// More groups: more warps for the same rows (a short prompt or a pruned layer gives few blocks),
// each with fewer scores in registers.
//
// kRope (FlashAttentionRope): q and k are rotated at their rows' positions as they are loaded;
// the block writes its q rows rotated to rope.q_out, and a block of a kv group's first head the
// keys of its rows to k_out and v_out (StoreOwnKeys).
template <bool kBf16, int kSteps, bool kRope, int kGroups>
__global__ __launch_bounds__(kFlashThreads* kGroups) void FlashAttentionKernel(
    AttentionArgs a, uint16_t* out_rounded, bool rounded_bf16, FlashRopeArgs rope) {
  constexpr int kDim = kSteps * 16, kRow = kDim + kFlashPad;
  constexpr int kBlockThreads = kFlashThreads * kGroups;
  constexpr int kTiles = 8 / kGroups;   // score fragments of 8 keys per warp and key tile
  constexpr int kChunks = 4 / kGroups;  // p·v steps of 16 keys per warp and key tile
  constexpr int kKeyUnits = kFlashKeys * kRow * 2 / 16,
                kValueUnits = kFlashKeys / 2 * kRow * 4 / 16;
  static_assert(kGroups == 1 || kGroups == 2 || kGroups == 4);
  // The key tile [kFlashKeys, kRow] of 16-bit elements, then the value tile [kFlashKeys / 2, kRow]
  // of key-pair words (LoadValueTile), 16-byte aligned for the vector stores. With kGroups > 1
  // the same memory then joins the groups' p·v: F32 [kFlashRows, kDim] fits in it.
  HAP_SHARED(Floats4, units, kKeyUnits + kValueUnits);
  static_assert((kKeyUnits + kValueUnits) * 16 >= kFlashRows * kDim * 4);
  HAP_SHARED(float, group_max, kGroups* kFlashRows);
  HAP_SHARED(float, group_sum, kGroups* kFlashRows);
  uint16_t* ks = reinterpret_cast<uint16_t*>(units);
  uint32_t* vs = reinterpret_cast<uint32_t*>(units + kKeyUnits);
  const int h = blockIdx.y, kv_head = h / (a.n_heads / a.n_kv_heads);
  const int warp = threadIdx.x / 32 % 4, group = threadIdx.x / kFlashThreads;
  const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * kFlashRows + warp * 16;
  const int rows[2] = {row0 + g, row0 + g + 8};
  const int local[2] = {warp * 16 + g, warp * 16 + g + 8};  // the rows within the tile
  int key_lo[2], key_hi[2];  // the keys each of the lane's rows may see (SegmentKeys)
  SegmentKeys(a, rows[0], &key_lo[0], &key_hi[0]);
  SegmentKeys(a, rows[1], &key_lo[1], &key_hi[1]);
  const int64_t q_stride = int64_t{a.n_heads} * kDim, kv_stride = int64_t{a.n_kv_heads} * kDim;
  const float* k_head = a.k + kv_head * kDim;
  const float* v_head = a.v + kv_head * kDim;
  // The warp's share of a key tile: its first key's offset in the tile.
  const int group_key = group * (kFlashKeys / kGroups);

  if constexpr (kRope) {
    if (h % (a.n_heads / a.n_kv_heads) == 0) {
      StoreOwnKeys<kSteps, kBlockThreads>(a, rope, kv_head,
                                          static_cast<int>(blockIdx.x) * kFlashRows);
    }
  }

  // The warp's q rows as A fragments, rounded (rows past n_q are 0); kRope: rotated first, and
  // written rotated to q_out by group 0 (the fragments cover each of the rows' elements once).
  uint32_t qa[kSteps][4];
  HAP_UNROLL
  for (int st = 0; st < kSteps; ++st) {
    HAP_UNROLL
    for (int r = 0; r < 4; ++r) {
      const int row = rows[r & 1], col = st * 16 + 2 * t + (r >= 2 ? 8 : 0);
      uint16_t lo = 0, hi = 0;
      if (row < a.n_q) {
        const int64_t at = row * q_stride + h * kDim;
        float e[2] = {a.q[at + col], a.q[at + col + 1]};
        if constexpr (kRope) {
          constexpr int kHalf = kDim / 2;
          const int position = rope.positions[row];
          HAP_UNROLL
          for (int u = 0; u < 2; ++u) {
            const int d = col + u, i = d < kHalf ? d : d - kHalf;
            float cs, sn;
            RopeAt(rope, position, i, kDim, &cs, &sn);
            e[u] = d < kHalf ? RotatedFirst(a.q[at + d], a.q[at + d + kHalf], cs, sn)
                             : RotatedSecond(a.q[at + d - kHalf], a.q[at + d], cs, sn);
            if (group == 0) rope.q_out[at + d] = e[u];
          }
        }
        lo = RoundHalf<kBf16>(e[0]);
        hi = RoundHalf<kBf16>(e[1]);
      }
      qa[st][r] = PackHalves(lo, hi);
    }
  }
  // Segments rise with the rows: the block's keys run from its first row's first key to its last
  // row's last, cut at the causal limit of the last row; tiles stay at multiples of kFlashKeys.
  const int first_row = static_cast<int>(blockIdx.x) * kFlashRows;
  const int last_row = min(a.n_q, first_row + kFlashRows) - 1;
  int first_key, end_key, unused;
  SegmentKeys(a, first_row, &first_key, &unused);
  SegmentKeys(a, last_row, &unused, &end_key);
  const int limit = a.causal ? min(end_key, a.causal_offset + last_row + 1) : end_key;
  const int tile0 = first_key / kFlashKeys;
  const int tiles = (limit + kFlashKeys - 1) / kFlashKeys;

  // Pass 1: each row's max and Σ exp(s − max) over the group's keys; a lane sums its own columns,
  // the row's four lanes are added at the end.
  float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.f, 0.f};
  float s[kTiles][4];
  for (int tile = tile0; tile < tiles; ++tile) {
    __syncthreads();
    LoadKeyTile<kBf16, kSteps, kRope, kBlockThreads>(k_head, kv_stride, tile * kFlashKeys, a.n_kv,
                                                     ks, rope);
    __syncthreads();
    ScoreTile<kBf16, kSteps, kTiles>(a, qa, ks + group_key * kRow, tile * kFlashKeys + group_key,
                                     rows, key_lo, key_hi, s);
    HAP_UNROLL
    for (int r = 0; r < 2; ++r) {
      float m = -INFINITY;
      HAP_UNROLL
      for (int nt = 0; nt < kTiles; ++nt) m = fmaxf(m, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      const float m_new = fmaxf(mx[r], m);
      if (m_new == -INFINITY) continue;  // nothing seen yet (every row sees a key in the end)
      float add = 0.f;
      HAP_UNROLL
      for (int nt = 0; nt < kTiles; ++nt) {
        add += expf(s[nt][2 * r] - m_new) + expf(s[nt][2 * r + 1] - m_new);
      }
      sum[r] = sum[r] * expf(mx[r] - m_new) + add;
      mx[r] = m_new;
    }
  }
  HAP_UNROLL
  for (int r = 0; r < 2; ++r) {
    sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
    sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
  }
  if constexpr (kGroups > 1) {
    // The row's max over the groups, and their sums scaled to it, in group order (a group that
    // saw none of the row's keys adds nothing).
    if (t == 0) {
      HAP_UNROLL
      for (int r = 0; r < 2; ++r) {
        group_max[group * kFlashRows + local[r]] = mx[r];
        group_sum[group * kFlashRows + local[r]] = sum[r];
      }
    }
    __syncthreads();
    HAP_UNROLL
    for (int r = 0; r < 2; ++r) {
      float m = -INFINITY;
      HAP_UNROLL
      for (int q = 0; q < kGroups; ++q) m = fmaxf(m, group_max[q * kFlashRows + local[r]]);
      float total = 0.f;
      HAP_UNROLL
      for (int q = 0; q < kGroups; ++q) {
        const float mq = group_max[q * kFlashRows + local[r]];
        if (mq != -INFINITY) total += group_sum[q * kFlashRows + local[r]] * expf(mq - m);
      }
      mx[r] = m;
      sum[r] = total;
    }
  }
  float inv[2];
  HAP_UNROLL
  for (int r = 0; r < 2; ++r) inv[r] = 1.f / sum[r];

  // Pass 2: p rounded, out += p·v over 2·kSteps fragments of 8 output columns.
  float o[2 * kSteps][4];
  HAP_UNROLL
  for (int dt = 0; dt < 2 * kSteps; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  for (int tile = tile0; tile < tiles; ++tile) {
    __syncthreads();
    LoadKeyTile<kBf16, kSteps, kRope, kBlockThreads>(k_head, kv_stride, tile * kFlashKeys, a.n_kv,
                                                     ks, rope);
    LoadValueTile<kBf16, kSteps, kBlockThreads>(v_head, kv_stride, tile * kFlashKeys, a.n_kv, vs);
    __syncthreads();
    ScoreTile<kBf16, kSteps, kTiles>(a, qa, ks + group_key * kRow, tile * kFlashKeys + group_key,
                                     rows, key_lo, key_hi, s);
    HAP_UNROLL
    for (int c = 0; c < kChunks; ++c) {  // 16 keys at a time: score fragments 2c and 2c + 1
      uint16_t p[2][4];
      HAP_UNROLL
      for (int half = 0; half < 2; ++half) {
        HAP_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int r = i >> 1;
          p[half][i] = RoundHalf<kBf16>(expf(s[2 * c + half][i] - mx[r]) * inv[r]);
        }
      }
      // The score fragments' D layout is the A layout of the product with v.
      const uint32_t pa[4] = {PackHalves(p[0][0], p[0][1]), PackHalves(p[0][2], p[0][3]),
                              PackHalves(p[1][0], p[1][1]), PackHalves(p[1][2], p[1][3])};
      // B[key][d] = v[key][d]: keys 2t, 2t + 1 (and 2t + 8, 2t + 9) of the chunk at d, one word.
      const uint32_t* vr = vs + ((group * kChunks + c) * 8 + t) * kRow + g;
      HAP_UNROLL
      for (int dt = 0; dt < 2 * kSteps; ++dt) {
        const uint32_t b[2] = {vr[dt * 8], vr[4 * kRow + dt * 8]};
        Mma16816<kBf16>(o[dt], pa, b);
      }
    }
  }
  if constexpr (kGroups > 1) {
    // Group q − 1 adds group q's p·v, from the last group down: group 0 holds the sum.
    float* joined = reinterpret_cast<float*>(units);  // F32 [kFlashRows, kDim]
    for (int q = kGroups - 1; q > 0; --q) {
      __syncthreads();
      if (group == q) {
        HAP_UNROLL
        for (int i = 0; i < 4; ++i) {
          HAP_UNROLL
          for (int dt = 0; dt < 2 * kSteps; ++dt) {
            joined[local[i >> 1] * kDim + dt * 8 + 2 * t + (i & 1)] = o[dt][i];
          }
        }
      }
      __syncthreads();
      if (group == q - 1) {
        HAP_UNROLL
        for (int i = 0; i < 4; ++i) {
          HAP_UNROLL
          for (int dt = 0; dt < 2 * kSteps; ++dt) {
            o[dt][i] += joined[local[i >> 1] * kDim + dt * 8 + 2 * t + (i & 1)];
          }
        }
      }
    }
    if (group != 0) return;
  }
  HAP_UNROLL
  for (int i = 0; i < 4; ++i) {
    const int row = rows[i >> 1];
    if (row >= a.n_q) continue;
    const int64_t at = row * q_stride + h * kDim + 2 * t + (i & 1);
    HAP_UNROLL
    for (int dt = 0; dt < 2 * kSteps; ++dt) a.out[at + dt * 8] = o[dt][i];
    if (out_rounded == nullptr) continue;
    HAP_UNROLL
    for (int dt = 0; dt < 2 * kSteps; ++dt) {
      out_rounded[at + dt * 8] = rounded_bf16 ? F32ToBf16(o[dt][i]) : F32ToF16(o[dt][i]);
    }
  }
  if (t == 0 && a.lse != nullptr) {
    for (int r = 0; r < 2; ++r) {
      if (rows[r] < a.n_q) a.lse[static_cast<int64_t>(h) * a.n_q + rows[r]] = mx[r] + logf(sum[r]);
    }
  }
}

template <bool kBf16, bool kRope>
KernelStatus LaunchFlash(const AttentionArgs& a, uint16_t* out_rounded, bool rounded_bf16,
                         const FlashRopeArgs& rope, int key_groups, Stream stream) {
  const dim3 grid(CeilDiv(a.n_q, kFlashRows), a.n_heads), block(kFlashThreads * key_groups);
  switch (a.head_dim / 16 * 2 + (key_groups == 2 ? 1 : 0)) {
#define HAP_FLASH_CASE(steps, groups)                                                        \
  case steps * 2 + (groups == 2 ? 1 : 0):                                                \
    return Launch("FlashAttentionKernel", FlashAttentionKernel<kBf16, steps, kRope, groups>, \
                  grid, block, 0, stream, a, out_rounded, rounded_bf16, rope);
    HAP_FLASH_CASE(1, 1)
    HAP_FLASH_CASE(1, 2)
    HAP_FLASH_CASE(2, 1)
    HAP_FLASH_CASE(2, 2)
    HAP_FLASH_CASE(3, 1)
    HAP_FLASH_CASE(3, 2)
    HAP_FLASH_CASE(4, 1)
    HAP_FLASH_CASE(4, 2)
    HAP_FLASH_CASE(5, 1)
    HAP_FLASH_CASE(5, 2)
    HAP_FLASH_CASE(6, 1)
    HAP_FLASH_CASE(6, 2)
    HAP_FLASH_CASE(7, 1)
    HAP_FLASH_CASE(7, 2)
    HAP_FLASH_CASE(8, 1)
    HAP_FLASH_CASE(8, 2)
#undef HAP_FLASH_CASE
    default:
      return KernelStatus::Error("FlashAttention: head_dim " + std::to_string(a.head_dim));
  }
}

}  // namespace

bool FlashAttentionSupports(const AttentionArgs& a) {
  // k and v are read 16 bytes at a time.
  const bool aligned =
      reinterpret_cast<uintptr_t>(a.k) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v) % 16 == 0;
  return a.head_dim % 16 == 0 && a.head_dim >= 16 && a.head_dim <= kFlashMaxHeadDim && aligned;
}

namespace {

// What FlashAttention and FlashAttentionRope both need of their arguments (`op` names the caller
// in the error).
KernelStatus CheckFlash(const char* op, const AttentionArgs& a, ElemType type,
                        const void* out_rounded, ElemType rounded_type, int key_groups) {
  KernelStatus st = CheckArgs(a);
  if (!st.ok) return st;
  if (key_groups < 0 || key_groups > 2) {
    return KernelStatus::Error(std::string(op) + ": key_groups " + std::to_string(key_groups) +
                               " is not 0 (by the shape), 1 or 2");
  }
  if (type == ElemType::kF32 || (out_rounded != nullptr && rounded_type == ElemType::kF32)) {
    return KernelStatus::Error(std::string(op) +
                               ": the operands and rounded out must be BF16 or F16");
  }
  if (!FlashAttentionSupports(a)) {
    return KernelStatus::Error(std::string(op) + ": head_dim " + std::to_string(a.head_dim) +
                               " is not a multiple of 16 up to " +
                               std::to_string(kFlashMaxHeadDim) +
                               ", or k or v is not 16-byte aligned");
  }
  return KernelStatus::Ok();
}

// The launch of FlashAttentionKernel<…, kRope, …> for checked arguments.
template <bool kRope>
KernelStatus RunFlash(const AttentionArgs& a, const FlashRopeArgs& rope, ElemType type,
                      void* out_rounded, ElemType rounded_type, int key_groups, Stream stream) {
  if (a.n_q == 0) return KernelStatus::Ok();
  auto* rounded = static_cast<uint16_t*>(out_rounded);
  const bool bf16 = rounded_type == ElemType::kBF16;
  const int groups = key_groups == 0 ? FlashKeyGroups(a) : key_groups;
  return type == ElemType::kBF16
             ? LaunchFlash<true, kRope>(a, rounded, bf16, rope, groups, stream)
             : LaunchFlash<false, kRope>(a, rounded, bf16, rope, groups, stream);
}

}  // namespace

int FlashKeyGroups(const AttentionArgs& a) {
  const int64_t blocks = CeilDiv(a.n_q, kFlashRows) * static_cast<int64_t>(a.n_heads);
  return blocks <= (a.head_dim <= 64 ? kFlashSplitBlocksSmallHead : kFlashSplitBlocks) ? 2 : 1;
}

KernelStatus FlashAttention(const AttentionArgs& a, ElemType type, Stream stream, void* out_rounded,
                            ElemType rounded_type, int key_groups) {
  const KernelStatus st =
      CheckFlash("FlashAttention", a, type, out_rounded, rounded_type, key_groups);
  if (!st.ok) return st;
  return RunFlash<false>(a, FlashRopeArgs{}, type, out_rounded, rounded_type, key_groups, stream);
}

KernelStatus FlashAttentionRope(const AttentionArgs& a, const FlashRopeArgs& rope, ElemType type,
                                Stream stream, void* out_rounded, ElemType rounded_type,
                                int key_groups) {
  const KernelStatus st =
      CheckFlash("FlashAttentionRope", a, type, out_rounded, rounded_type, key_groups);
  if (!st.ok) return st;
  if (a.n_kv != a.n_q || a.causal_offset != 0) {
    return KernelStatus::Error("FlashAttentionRope: needs n_kv == n_q (" + std::to_string(a.n_kv) +
                               " and " + std::to_string(a.n_q) + ") and causal_offset 0");
  }
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (rope.positions == nullptr || rope.q_out == nullptr || rope.k_out == nullptr ||
      rope.v_out == nullptr || !aligned(rope.k_out) || !aligned(rope.v_out)) {
    return KernelStatus::Error(
        "FlashAttentionRope: no positions, or a missing output (k_out and v_out 16-byte aligned)");
  }
  if (rope.q_out == a.q || rope.k_out == a.k || rope.v_out == a.v) {
    return KernelStatus::Error("FlashAttentionRope: an output is its own input");
  }
  if (rope.table_positions < 0 ||
      (rope.table_positions > 0 && (rope.cos_table == nullptr || rope.sin_table == nullptr))) {
    return KernelStatus::Error("FlashAttentionRope: a table of " +
                               std::to_string(rope.table_positions) +
                               " positions without its cos and sin");
  }
  return RunFlash<true>(a, rope, type, out_rounded, rounded_type, key_groups, stream);
}

KernelStatus Attention(const AttentionArgs& a, Stream stream) {
  KernelStatus st = CheckArgs(a);
  if (!st.ok) return st;
  if (a.n_q == 0) return KernelStatus::Ok();
  // The widest key tile that fits: 32 keys (one per lane) up to head_dim 136, fewer beyond.
  int kv_tile = 32;
  while (SharedBytes(a.head_dim, kv_tile) > kMaxSharedBytes) kv_tile /= 2;
  return Launch("AttentionKernel", AttentionKernel, dim3(CeilDiv(a.n_q, kQueryTile), a.n_heads),
                dim3(kThreads), SharedBytes(a.head_dim, kv_tile), stream, a, kv_tile);
}

}  // namespace hap::cuda
