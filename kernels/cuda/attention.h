// Prefill attention on the GPU with each query row's log-sum-exp (kernels/cpu/attention.h):
// out[r, h] = Σ_j softmax_j(scale · q_{r,h}·k_j) v_j over the keys row r sees, grouped-query
// heads, causal or not. Flash-style: a block holds a tile of 16 query rows of one head and walks
// the keys in tiles with an online softmax (running max and sum), so no [n_q, n_kv] buffer
// exists. CUDA cores only (F32 FMAs, no tensor cores); head_dim up to kMaxAttentionHeadDim.
// FlashAttention and NarrowAttention below are the tensor-core paths, for BF16/F16 operands.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"
#include "kernels/op_args.h"

namespace hap::cuda {

inline constexpr int kMaxAttentionHeadDim = 256;
// Runs (AttentionArgs::segment_bounds) that start at multiples of this meet the tiles of
// Attention (16 rows, keys from the run's start) and FlashAttention (64 rows, 64 keys) as an
// attention of their own does, so their rows get that attention's result bit for bit
// (BackendCaps::attention_run_align). NarrowAttention's products span every key: not there.
inline constexpr int kAttentionRunAlign = 64;

// args as for cpu::Attention, every pointer a device pointer: q F32 [n_q, n_heads·head_dim],
// k and v F32 [n_kv, n_kv_heads·head_dim], out F32 [n_q, n_heads·head_dim], lse F32
// [n_heads, n_q] = log Σ_j exp(scale · q·k_j) or nullptr. Bad shapes (n_kv, heads or head_dim
// not positive, n_heads not a multiple of n_kv_heads, head_dim past kMaxAttentionHeadDim, a causal
// offset that leaves a query row past the last key) and null pointers are an Error; n_q = 0 does
// nothing. Segments (AttentionArgs::segment_bounds, in device memory) are honoured by all three
// paths: a row's tile visits only the key tiles its segments span, and masks the keys outside
// the row's own segment. Their fields are checked (AttentionArgs::SegmentError); the bounds
// themselves are not read on the host, and bad ones are clamped to the keys, never read past.
KernelStatus Attention(const AttentionArgs& args, Stream stream);

class Gemm;

// The narrow path, for args.operands BF16 or F16 (`type`; args.operands itself is not read):
// q, k and v rounded to `type`, then per chunk of query rows s = scale · q·kᵀ (cuBLAS, batched
// over heads, F32 accumulation), each row's softmax rounded to `type` with its log-sum-exp
// (one kernel), out = p·v (cuBLAS, F32). A chunk's scores and probabilities take at most
// chunk_bytes (or one query row's), so no [n_q, n_kv] buffer per head grows with the prompt
// past that bound. Ordered on gemm's stream; `workspace`: NarrowAttentionWorkspaceBytes(args,
// chunk_bytes) of device memory. Arguments as Attention's, with the same errors.
inline constexpr int64_t kNarrowAttentionChunkBytes = int64_t{64} << 20;
size_t NarrowAttentionWorkspaceBytes(const AttentionArgs& args,
                                     int64_t chunk_bytes = kNarrowAttentionChunkBytes);
KernelStatus NarrowAttention(const AttentionArgs& args, ElemType type, Gemm& gemm, void* workspace,
                             int64_t chunk_bytes = kNarrowAttentionChunkBytes);

// The tensor-core path without a workspace, for args.operands BF16 or F16 (`type`) and head_dim
// a multiple of 16 up to kFlashMaxHeadDim, k and v 16-byte aligned (FlashAttentionSupports, which
// takes null pointers as aligned, for a plan made before them): the same arithmetic as
// NarrowAttention — q, k and v rounded to `type`, s = scale · q·k in F32, p = exp(s − max) / Σ
// rounded to `type`, out = Σ p·v in F32, and each row's log-sum-exp — in one kernel that keeps
// the scores in registers: per block 64 query rows of one head, two passes over the keys in
// tiles of 64 (the row's max and sum, then p·v), products on tensor cores (mma.sync m16n8k16,
// kernels/cuda/mma.cuh). q, k and v stay F32 in memory and are rounded as they are loaded.
// Arguments as Attention's, with the same errors, and an error for another head_dim. With
// out_rounded (device, [n_q, n_heads·head_dim]) the output is also written rounded to
// rounded_type (BF16 or F16): the o product's input on narrow weights, with no launch to round it.
//
// key_groups: 1, each of a block's 4 warps takes its 16 rows against every key; 2, a block has 8
// warps and each pair of them splits every key tile between them, joining their maxima, sums and
// p·v in shared memory (the same arithmetic, summed in another order: the outputs agree to F32
// rounding). Twice the warps for the same rows, for shapes that give a GPU few blocks. 0 chooses
// by the shape (FlashKeyGroups).
inline constexpr int kFlashMaxHeadDim = 128;
bool FlashAttentionSupports(const AttentionArgs& args);
KernelStatus FlashAttention(const AttentionArgs& args, ElemType type, Stream stream,
                            void* out_rounded = nullptr, ElemType rounded_type = ElemType::kBF16,
                            int key_groups = 0);
// The key groups FlashAttention takes for key_groups 0: 2 where the grid (a block per 64 query
// rows and head) has at most kFlashSplitBlocks blocks (kFlashSplitBlocksSmallHead at head_dim ≤
// 64, whose smaller blocks fit twice on a multiprocessor), else 1. Those are one wave of the
// larger blocks on a GPU of about 130 multiprocessors (H100, H200): the prefill of the layers
// HAP has pruned, and the vision tower's 577 rows of 16 heads.
inline constexpr int kFlashSplitBlocks = 128;
inline constexpr int kFlashSplitBlocksSmallHead = 256;
int FlashKeyGroups(const AttentionArgs& args);

// RoPE applied by FlashAttention as it loads q and k (FlashAttentionRope), at each row's position
// (one axis; row r of q and key r of k share positions[r]).
struct FlashRopeArgs {
  const int32_t* positions = nullptr;  // I32 [n_q]
  // RopeTable's cos and sin, F32 [table_positions, head_dim / 2]; a position outside
  // [0, table_positions) has its angle computed in F64 as Rope does (none with 0).
  const float* cos_table = nullptr;
  const float* sin_table = nullptr;
  int table_positions = 0;
  float theta = 0.f;
  // Where the rotated q and k and a copy of v go (F32, shaped as args.q, k and v; none of them
  // args.q, k or v): what Rope leaves in q and k, for the KV cache and the pruners.
  float* q_out = nullptr;
  float* k_out = nullptr;
  float* v_out = nullptr;
};

// FlashAttention of q and k rotated as Rope rotates them (RopePair of q and k, then
// FlashAttention: the same bits in out, out_rounded and lse), in one launch; it also writes the
// rotated q and k and a copy of v to rope's q_out, k_out and v_out, which is what RopePair would
// have left in q, k and v. args.q, k and v are read only, never written (a block writes the key
// rows of its own query rows; other blocks still read them unrotated). Needs n_kv == n_q and
// causal_offset 0 (a prefill's rows attending to each other), as well as what FlashAttention
// needs; errors as FlashAttention's, and for a missing or aliased output, positions or table.
KernelStatus FlashAttentionRope(const AttentionArgs& args, const FlashRopeArgs& rope, ElemType type,
                                Stream stream, void* out_rounded = nullptr,
                                ElemType rounded_type = ElemType::kBF16, int key_groups = 0);

}  // namespace hap::cuda
