#include <cmath>
#include <string>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/paq.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/text_visual_attention.h"

namespace hap::cuda {
namespace {

constexpr int kKeysPerTile = 32;  // one key per lane
constexpr int kMaxRowsPerBlock = 8;

// The arguments with the strides resolved and the kv-head grouping precomputed.
struct RowsParams {
  const float* q;    // F32 [n_text, q_stride]
  const float* k;    // F32 [n_vis, k_stride]
  const float* lse;  // F32 [n_heads, lse_stride]; only without renormalize
  float* out;        // F32 [n_heads, n_text, n_vis]
  double* entropy;   // F64 [n_heads, n_text] or null
  int n_text;
  int n_vis;
  int group;  // query heads per kv head
  int head_dim;
  int64_t q_stride;
  int64_t k_stride;
  int64_t lse_stride;
  float scale;
  int renormalize;
  float* paq;           // F32 [n_heads], or null: each head's PAQ (TextVisualAttentionPaq)
  unsigned* head_done;  // with paq: [n_heads] counts of the head's blocks done, 0 between calls
};

__device__ __forceinline__ double WarpSumF64(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// grid (ceil(n_text / rows), n_heads), block 32·rows threads (rows ≤ 8: one warp per text row;
// with paq, 8). Dynamic shared memory: F32 [32, head_dim + 1] key tile (padded so that lanes
// reading their own key's column d hit distinct banks) and F32 [rows, head_dim] query rows.
// With paq, the last of a head's blocks to finish makes that head's PAQ from its map and row
// entropies (BlockPaq, as PaqKernel makes it), reading what the other blocks wrote through L2.
__global__ void TextVisualAttentionKernel(RowsParams p) {
  HAP_DYNAMIC_SHARED(float, smem);
  const int hd = p.head_dim;
  const int pitch = hd + 1;
  float* k_tile = smem;                         // F32 [32, hd + 1]
  float* q_rows = smem + kKeysPerTile * pitch;  // F32 [rows, hd]
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int rows = blockDim.x / 32;
  const int h = blockIdx.y;
  const int j0 = blockIdx.x * rows;
  const int j = j0 + warp;
  const bool row_ok = j < p.n_text;  // uniform over the warp
  const float* k_head = p.k + static_cast<int64_t>(h / p.group) * hd;

  for (int e = threadIdx.x; e < rows * hd; e += blockDim.x) {
    const int jj = j0 + e / hd;
    q_rows[e] = jj < p.n_text ? p.q[jj * p.q_stride + static_cast<int64_t>(h) * hd + e % hd] : 0.f;
  }
  const float* q = q_rows + warp * hd;
  float* out = p.out + (static_cast<int64_t>(h) * p.n_text + (row_ok ? j : 0)) * p.n_vis;
  const float lse = !p.renormalize && row_ok ? p.lse[h * p.lse_stride + j] : 0.f;

  float lane_max = -INFINITY;
  for (int t0 = 0; t0 < p.n_vis; t0 += kKeysPerTile) {
    __syncthreads();  // the previous tile is consumed (and, the first time, q_rows written)
    for (int e = threadIdx.x; e < kKeysPerTile * hd; e += blockDim.x) {
      const int key = e / hd, d = e % hd;
      const int i = t0 + key;
      k_tile[key * pitch + d] = i < p.n_vis ? k_head[i * p.k_stride + d] : 0.f;
    }
    __syncthreads();
    const int i = t0 + lane;
    if (row_ok && i < p.n_vis) {
      const float* kr = k_tile + lane * pitch;
      float dot = 0.f;
      for (int d = 0; d < hd; ++d) dot = fmaf(q[d], kr[d], dot);
      const float x = p.scale * dot;
      if (p.renormalize) {
        out[i] = x;  // the logit; this lane turns it into a weight below
        lane_max = fmaxf(lane_max, x);
      } else {
        out[i] = expf(x - lse);
      }
    }
  }
  if (row_ok && p.renormalize) {
    // Softmax over the row's visual logits; lane l owns columns l, l + 32, … in every pass.
    const float mx = WarpMax(lane_max);
    double z = 0.0, zy = 0.0;  // Σ e^y and Σ e^y·y, y = x − max
    for (int i = lane; i < p.n_vis; i += 32) {
      const float y = out[i] - mx;
      const float e = expf(y);
      out[i] = e;
      z += e;
      zy += static_cast<double>(e) * y;
    }
    z = WarpSumF64(z);
    zy = WarpSumF64(zy);
    const float inv = static_cast<float>(1.0 / z);  // z ≥ 1: the max term is e^0
    for (int i = lane; i < p.n_vis; i += 32) out[i] *= inv;
    if (p.entropy != nullptr && lane == 0) {
      p.entropy[static_cast<int64_t>(h) * p.n_text + j] = log(z) - zy / z;
    }
  }
  if (p.paq == nullptr) return;  // uniform

  // The head's PAQ, by its last block.
  HAP_SHARED(double, paq_scratch, 32);
  HAP_SHARED(int, paq_bad, 1);
  if (!LastBlockToArrive(p.head_done + h, gridDim.x)) return;  // uniform
  const int64_t map = static_cast<int64_t>(h) * p.n_text;
  BlockPaq</*kThroughL2=*/true>(p.out + map * p.n_vis, p.entropy + map, p.n_text, p.n_vis,
                                p.paq + h, paq_scratch, paq_bad);
}

}  // namespace

namespace {

// TextVisualAttention's checks and launch; with paq, each head's PAQ too.
KernelStatus LaunchRows(const TextVisualAttentionArgs& a, float* paq, unsigned* head_done,
                        Stream stream) {
  if (a.q_text == nullptr || a.k_vis == nullptr || a.out == nullptr ||
      (!a.renormalize && a.lse == nullptr)) {
    return KernelStatus::Error("TextVisualAttention: null pointer argument");
  }
  if (a.n_text <= 0 || a.n_vis <= 0 || a.n_heads <= 0 || a.n_kv_heads <= 0 || a.head_dim <= 0) {
    return KernelStatus::Error("TextVisualAttention: sizes must be positive");
  }
  if (a.n_heads % a.n_kv_heads != 0) {
    return KernelStatus::Error("TextVisualAttention: n_heads is not a multiple of n_kv_heads");
  }
  if (a.head_dim > kTextVisualAttentionMaxHeadDim) {
    return KernelStatus::Error("TextVisualAttention: head_dim " + std::to_string(a.head_dim) +
                               " above " + std::to_string(kTextVisualAttentionMaxHeadDim));
  }
  RowsParams p;
  p.q = a.q_text;
  p.k = a.k_vis;
  p.lse = a.lse;
  p.out = a.out;
  p.entropy = a.row_entropy;
  p.n_text = a.n_text;
  p.n_vis = a.n_vis;
  p.group = a.n_heads / a.n_kv_heads;
  p.head_dim = a.head_dim;
  p.q_stride = a.q_stride ? a.q_stride : int64_t{a.n_heads} * a.head_dim;
  p.k_stride = a.k_stride ? a.k_stride : int64_t{a.n_kv_heads} * a.head_dim;
  p.lse_stride = a.lse_stride ? a.lse_stride : a.n_text;
  p.scale = a.scale;
  p.renormalize = a.renormalize ? 1 : 0;
  p.paq = paq;
  p.head_done = head_done;
  if (p.q_stride < int64_t{a.n_heads} * a.head_dim ||
      p.k_stride < int64_t{a.n_kv_heads} * a.head_dim || p.lse_stride < a.n_text) {
    return KernelStatus::Error("TextVisualAttention: a stride is smaller than its row");
  }
  if (!std::isfinite(a.scale)) {
    return KernelStatus::Error("TextVisualAttention: scale is not finite");
  }
  if (a.row_entropy != nullptr && !a.renormalize) {
    return KernelStatus::Error("TextVisualAttention: row entropies need renormalize");
  }
  // BlockPaq takes kPaqColumnThreads threads: with paq, every block has 8 warps.
  static_assert(32 * kMaxRowsPerBlock == kPaqColumnThreads);
  const int rows = a.n_text < kMaxRowsPerBlock && paq == nullptr ? a.n_text : kMaxRowsPerBlock;
  const size_t smem = sizeof(float) * (kKeysPerTile * (a.head_dim + 1) + rows * a.head_dim);
  return Launch("TextVisualAttentionKernel", TextVisualAttentionKernel,
                dim3(CeilDiv(a.n_text, rows), a.n_heads), dim3(32 * rows), smem, stream, p);
}

}  // namespace

KernelStatus TextVisualAttention(const TextVisualAttentionArgs& a, Stream stream) {
  return LaunchRows(a, nullptr, nullptr, stream);
}

KernelStatus TextVisualAttentionPaq(const TextVisualAttentionArgs& a, float* paq,
                                    unsigned* head_done, Stream stream) {
  if (paq == nullptr || head_done == nullptr || a.row_entropy == nullptr || !a.renormalize) {
    return KernelStatus::Error(
        "TextVisualAttentionPaq: needs renormalised rows with their entropies, the PAQ output "
        "and the heads' counters");
  }
  return LaunchRows(a, paq, head_done, stream);
}

}  // namespace hap::cuda
