// Argument structs of the attention, pruning and sampling ops, shared by every backend
// (kernels/backend.h, kernels/pruning_kernels.h): the pointers are in the memory of the backend
// that runs the op (host memory for the CPU backend) unless a comment says "host". Plain C++
// with no Abseil, so the CUDA sources read the same structs the host code fills.
#pragma once

#include <cstdint>

#include "base/dtype.h"

namespace hap {

// What the rows of a matrix product are. kIndependent: different sequences (a batched decode
// step): each row's result must be what that row gives alone, whatever m (batch invariance).
// kOneSequence: the tokens of one sequence (a prefill, an image): the backend may take a path
// whose arithmetic depends on m, such as rounding x to BF16 for a dot-product GEMM.
enum class LinearRows { kIndependent, kOneSequence };

// The elementwise activations Backend::Activate applies in place (CLIP's quick_gelu, exact GELU,
// gelu_pytorch_tanh).
enum class Activation { kQuickGelu, kGelu, kGeluTanh };

// Rotary embedding whose rotated pairs take their positions from several axes (rotate_half
// layout: pair i is (i, i + head_dim/2), i < head_dim/2). The pairs are cut, in order, into
// sections[0], sections[1], sections[2] pairs (summing to head_dim/2); the pairs of section a
// rotate by the row's position on axis a. Pair i's frequency is theta^(−i/(head_dim/2)) over
// the whole head, or with per_section_frequencies theta^(−j/sections[a]) for the j-th pair of
// its section. So:
//   1-D RoPE (LLaMA):            sections {head_dim/2, 0, 0}
//   M-RoPE (Qwen2.5-VL's text):  sections = mrope_section {16, 24, 24}, positions (t, h, w)
//   2-D vision rotary (its ViT): sections {head_dim/4, head_dim/4, 0}, per-section frequencies,
//                                positions (patch row, patch column)
// Angles are computed in F64, as Rope's.
struct RopeAxesArgs {
  float* x = nullptr;                  // F32 [rows, n_heads * head_dim], rotated in place
  const int32_t* positions = nullptr;  // I32 [rows, axes]: axis a of row r at r * axes() + a
  int rows = 0;
  int n_heads = 0;
  int head_dim = 0;
  float theta = 0.f;
  int sections[3] = {0, 0, 0};
  bool per_section_frequencies = false;

  // Axes that own pairs (the last owning axis + 1): the positions of a row, side by side, so a
  // row's positions move with it as one record when rows are gathered.
  int axes() const { return sections[2] > 0 ? 3 : sections[1] > 0 ? 2 : 1; }

  // What is wrong with the shape, or "" (every backend checks with it).
  const char* Error() const {
    if (head_dim <= 0 || head_dim % 2 != 0 || rows < 0 || n_heads <= 0) {
      return "RopeAxes: rows must be >= 0, n_heads > 0 and head_dim even";
    }
    if (sections[0] < 0 || sections[1] < 0 || sections[2] < 0 ||
        sections[0] + sections[1] + sections[2] != head_dim / 2) {
      return "RopeAxes: the sections must be non-negative and sum to head_dim / 2";
    }
    return "";
  }
};

struct AttentionArgs {
  const float* q = nullptr;  // F32 [n_q, n_heads * head_dim]
  const float* k = nullptr;  // F32 [n_kv, n_kv_heads * head_dim]
  const float* v = nullptr;  // F32 [n_kv, n_kv_heads * head_dim]
  float* out = nullptr;      // F32 [n_q, n_heads * head_dim]
  float* lse = nullptr;      // optional F32 [n_heads, n_q]: log Σ_j exp(scale · q·k_j)
  int n_q = 0;
  int n_kv = 0;
  int n_heads = 0;
  int n_kv_heads = 0;  // query head h reads kv head h / (n_heads / n_kv_heads)
  int head_dim = 0;
  float scale = 0.f;
  // Causal: query row r sees keys [0, causal_offset + r]; otherwise every key.
  bool causal = false;
  int causal_offset = 0;
  // The type of the products' operands. kF32: q, k, v and the probabilities as they are.
  // kBF16 / kF16: q, k and v are rounded to it (nearest even) before q·k and the probabilities
  // (normalised, exp(s − max) / Σ) before p·v, with F32 accumulation: what tensor cores compute,
  // and what attention over a BF16 checkpoint's activations in that dtype amounts to. The
  // log-sum-exp comes from the rounded q·k.
  DType operands = DType::kF32;
  // Variable-length attention: with n_segments > 0 the rows are cut into n_segments runs at
  // segment_bounds (I32 [n_segments + 1], non-decreasing from 0 to n_q, in the backend's memory)
  // and query row r of run s sees only the keys of run s, [b_s, b_{s+1}) (up to r itself when
  // causal). n_kv must equal n_q and causal_offset be 0. One call then attends within many
  // windows or sequences laid end to end (Qwen2.5-VL's vision windows), with no padding; each
  // run's rows get what that run alone would give, up to F32 rounding.
  const int32_t* segment_bounds = nullptr;
  int n_segments = 0;

  // What is wrong with n_segments given the shape, or "" (a planned step checks this before
  // its bounds have an address).
  const char* SegmentShapeError() const {
    if (n_segments < 0) return "Attention: n_segments must be >= 0";
    if (n_segments > 0 && (n_kv != n_q || causal_offset != 0)) {
      return "Attention: segments need n_kv == n_q and causal_offset 0";
    }
    return "";
  }
  // SegmentShapeError, and the bounds' pointer (every backend checks with it; the bounds
  // themselves are read only where they are in host memory).
  const char* SegmentError() const {
    if (n_segments > 0 && segment_bounds == nullptr) {
      return "Attention: n_segments > 0 without segment_bounds";
    }
    return SegmentShapeError();
  }
};

// `rows` consecutive cache rows: k and v each [rows, n_kv_heads * head_dim] of the cache dtype.
struct KvSpan {
  const void* k = nullptr;
  const void* v = nullptr;
  int rows = 0;
};

// One query row per sequence over that sequence's cached rows. With n_seqs = 1 and no
// span_begin, the one sequence sees every span; a batch of sequences (one decode step of several)
// gives sequence i the query row q + i·n_heads·head_dim, the output row out + i·n_heads·head_dim
// and the spans [span_begin[i], span_begin[i + 1]). Each sequence's result is bit for bit what
// it gets alone.
struct DecodeAttentionArgs {
  const float* q = nullptr;  // F32 [n_seqs, n_heads * head_dim], RoPE applied
  const KvSpan* spans = nullptr;
  int n_spans = 0;               // together they hold every row the queries see, in order
  DType kv_dtype = DType::kF32;  // kF32 or kBF16
  float* out = nullptr;          // F32 [n_seqs, n_heads * head_dim]
  int n_heads = 0;
  int n_kv_heads = 0;  // query head h reads kv head h / (n_heads / n_kv_heads)
  int head_dim = 0;
  float scale = 0.f;
  int n_seqs = 1;
  // Host I32 [n_seqs + 1], non-decreasing from 0 to n_spans; null = one sequence over all spans.
  const int* span_begin = nullptr;
  // spans and span_begin are in the backend's memory rather than the host's: a decode step
  // uploads every layer's tables at once before its first layer (LlamaDecoder, one copy per
  // step). The backend then reads them only where it runs the op, so a device backend neither
  // checks nor copies them; the engine built them from its own caches. n_spans is still given.
  bool tables_in_backend = false;
  // Host: at least the most rows any sequence of the batch sees, for a device backend that splits
  // each sequence's rows across blocks (flash-decoding); 0 = not given (a device backend counts
  // them from host tables, or runs one block per head and sequence). The CPU ignores it. Any
  // value from the true most on gives the same result, bit for bit: a captured step gives a
  // bucket of it, so that one graph serves contexts up to the bucket.
  int max_rows = 0;
  // Backend memory of Backend::DecodeAttentionWorkspaceBytes(args) bytes or more for the op's
  // partial results; null: the backend's own scratch (a device's per-thread area).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// A decode step's new K and V rows into their caches (Backend::StoreKvRows): row i of k and of
// v stored in `dtype` (F32 as it is, BF16 rounded to nearest even as Backend::StoreF32As rounds)
// at k_dst[i] and v_dst[i]. The address tables are in the backend's memory, as are the rows;
// a device backend writes a whole batch's rows of a layer in one launch.
struct StoreKvRowsArgs {
  const float* k = nullptr;      // F32 [n, kv_dim], RoPE applied
  const float* v = nullptr;      // F32 [n, kv_dim]
  void* const* k_dst = nullptr;  // [n]: where row i's kv_dim values of dtype go
  void* const* v_dst = nullptr;  // [n]
  int n = 0;
  int kv_dim = 0;
  DType dtype = DType::kF32;  // kF32 or kBF16
};

// The most candidates TopLogits returns per row: what a device sends back instead of a row of
// logits (2 KiB a row against 128 KiB for a 32000-token vocabulary).
inline constexpr int kMaxTopLogits = 256;

// A sampler's candidates (kernels/cpu/sampling.h): for each row of logits its k largest values
// with their ids, in the order the sampler sorts them, and the row's softmax denominator.
struct TopLogitsArgs {
  const float* logits = nullptr;  // F32 [rows, n]
  int rows = 0;
  int n = 0;
  int k = 0;  // candidates per row, 1 ≤ k ≤ min(n, kMaxTopLogits)
  // host, optional F32 [rows]: row r's temperature; where it is > 0, row_sum[r] is filled.
  const float* temperature = nullptr;
  // host F32 [rows, k]: row r's k largest logits, descending; among equal values (−0 and +0
  // included) the lower id first — Sampler's order. A row holding a NaN has no such order: its
  // ids are all −1 (and its values and row_sum NaN).
  float* values = nullptr;
  int32_t* ids = nullptr;  // host I32 [rows, k]: the ids of `values`
  // host F64 [rows] (with temperature): Σ_i exp((x_i − max_r) / T_r) over the whole row, in F64
  // with (x_i − max_r) / T_r taken as Sampler does; in no particular order of summation (the
  // caller bounds the rounding difference). 0 where T_r ≤ 0.
  double* row_sum = nullptr;
};

// Arguments of TextVisualAttention. All strides count floats. A CUDA twin of this op takes the
// same struct (device pointers) plus a cudaStream_t.
struct TextVisualAttentionArgs {
  const float* q_text = nullptr;  // F32 [n_text, q_stride]; head h at columns [h·hd, (h+1)·hd)
  const float* k_vis = nullptr;   // F32 [n_vis, k_stride]; kv head g at columns [g·hd, (g+1)·hd)
  const float* lse = nullptr;     // F32 [n_heads, lse_stride]; lse[h·lse_stride + j] belongs to
                                  // text row j. Only read when renormalize is false.
  int n_text = 0;
  int n_vis = 0;
  int n_heads = 0;
  int n_kv_heads = 0;  // query head h reads kv head h / (n_heads / n_kv_heads)
  int head_dim = 0;
  int64_t q_stride = 0;    // 0 → n_heads·head_dim
  int64_t k_stride = 0;    // 0 → n_kv_heads·head_dim
  int64_t lse_stride = 0;  // 0 → n_text
  float scale = 0.f;       // softmax scale, usually 1/sqrt(head_dim)
  // false: out = α_ji = exp(scale·q_j·k_i − lse_j), the weights of the full softmax row.
  // true:  out = α_ji / Σ_i' α_ji' (each row a distribution over the visual tokens present).
  bool renormalize = true;
  float* out = nullptr;  // F32 [n_heads, n_text, n_vis]
  // Optional, with renormalize only: F64 [n_heads, n_text], the entropy −Σ_i â_i ln â_i of
  // each renormalised row, from the logits (no per-element logarithm). PaqFromRowEntropies
  // turns it into PAQ without taking a logarithm per map element.
  double* row_entropy = nullptr;
};

// Arguments of VisionZipMerge. The token lists are host memory for the Backend op (the CUDA
// backend uploads them); k, hidden and out are in the backend's memory.
struct VisionZipMergeArgs {
  const float* k = nullptr;       // F32 [n_tokens, n_heads·head_dim]; head h at [h·hd, (h+1)·hd)
  const float* hidden = nullptr;  // F32 [n_tokens, d_model]
  int n_tokens = 0;
  int n_heads = 0;
  int head_dim = 0;
  int d_model = 0;
  const int* targets = nullptr;  // [n_targets] token indices in [0, n_tokens)
  int n_targets = 0;
  const int* sources = nullptr;  // [n_sources] token indices, merged in this order; may be null
  int n_sources = 0;             // when 0
  float* out = nullptr;          // F32 [n_targets, d_model]
  // Optional, host memory for the Backend op: [n_targets] how many sources each target took.
  int* merged_count = nullptr;
};

}  // namespace hap
