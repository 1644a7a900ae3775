#include "runtime/model/qwen_vision_tower.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "runtime/model/cancellation.h"
#include "runtime/model/qwen_vision_layout.h"

namespace hap {
namespace {

// The vision blocks' and the merger's RMSNorm epsilon (Qwen2_5_VLVisionBlock, the merger's ln_q:
// fixed, not in config.json).
constexpr float kVisionRmsEps = 1e-6f;
// The vision rotary's base (Qwen2_5_VisionRotaryEmbedding's default theta).
constexpr float kVisionRopeTheta = 10000.f;

// Rows [first, first + count) of a matrix view: q, k and v of the fused qkv weight and bias.
absl::StatusOr<TensorView> Rows(const TensorView& w, int64_t first, int64_t count) {
  return w.Narrow(0, first, count);
}

}  // namespace

absl::Status RunQwenVisionInto(const Backend& backend, const Qwen25VLVisionConfig& cfg,
                               const QwenVisionWeights& w, const float* pixels, int64_t n_rows,
                               const std::vector<ImageGrid>& grids, DType attention_operands,
                               BackendArray<float>* out) {
  const int d = cfg.hidden_size;
  const int heads = cfg.num_heads;
  const int hd = cfg.head_dim();
  const int ffn = cfg.intermediate_size;
  const int merge = cfg.spatial_merge_size;
  const int unit = merge * merge;  // patches per merged token
  const int64_t patch_len =
      int64_t{cfg.in_channels} * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size;
  int64_t n64 = 0;
  for (const ImageGrid& g : grids) n64 += g.patches();
  if (grids.empty() || n64 != n_rows || n64 % unit != 0 || n64 > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vision tower: %d pixel rows for %d image grids of %d patches in all",
                        n_rows, grids.size(), n64));
  }
  const int n = static_cast<int>(n64);
  const int n_units = n / unit;
  // Where each patch sits (2-D rotary) and the windows, in the preprocessor's order.
  const VisionPatchPositions where = QwenVisionPatchPositions(grids, merge);
  HAP_ASSIGN_OR_RETURN(const VisionWindowLayout layout,
                       QwenVisionWindowLayout(grids, cfg.patch_size, merge, cfg.window_size));

  // Patch embedding: the Conv3d over (C, T, P, P) is a product with its kernel as a matrix.
  BackendArray<float> embedded(backend), x(backend);  // F32 [n, d]
  HAP_RETURN_IF_ERROR(embedded.Resize(static_cast<size_t>(n) * d));
  HAP_RETURN_IF_ERROR(x.Resize(static_cast<size_t>(n) * d));
  TensorView patch_w = w.patch_w;
  patch_w.shape = {d, patch_len};
  HAP_RETURN_IF_ERROR(
      backend.Linear(pixels, patch_w, nullptr, embedded.data(), n, LinearRows::kOneSequence));
  // The blocks see the patches window by window: whole merge units in layout.window_index's
  // order. The rotary positions (row, column) follow the same order, I32 [n, 2].
  HAP_RETURN_IF_ERROR(backend.GatherRows(embedded.data(), n_units, sizeof(float) * d * unit,
                                         layout.window_index.data(), n_units, x.data()));
  std::vector<int32_t> positions(static_cast<size_t>(n) * 2);
  for (int j = 0; j < n_units; ++j) {
    for (int p = 0; p < unit; ++p) {
      const int64_t from = int64_t{layout.window_index[j]} * unit + p;
      const int64_t to = int64_t{j} * unit + p;
      positions[to * 2] = where.row[from];
      positions[to * 2 + 1] = where.col[from];
    }
  }
  BackendArray<int32_t> positions_dev(backend);
  HAP_RETURN_IF_ERROR(positions_dev.Assign(positions.data(), positions.size()));

  BackendArray<float> h(backend), q(backend), k(backend), v(backend), attn(backend);
  BackendArray<float> gate(backend), up(backend);
  for (BackendArray<float>* a : {&h, &q, &k, &v, &attn}) {
    HAP_RETURN_IF_ERROR(a->Resize(static_cast<size_t>(n) * d));
  }
  HAP_RETURN_IF_ERROR(gate.Resize(static_cast<size_t>(n) * ffn));
  HAP_RETURN_IF_ERROR(up.Resize(static_cast<size_t>(n) * ffn));
  constexpr LinearRows kRows = LinearRows::kOneSequence;
  RopeAxesArgs rope;
  rope.positions = positions_dev.data();
  rope.rows = n;
  rope.n_heads = heads;
  rope.head_dim = hd;
  rope.theta = kVisionRopeTheta;
  rope.sections[0] = rope.sections[1] = hd / 4;  // row, then column
  rope.sections[2] = hd / 2 - 2 * (hd / 4);
  rope.per_section_frequencies = true;
  if (rope.sections[2] != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "vision tower: head_dim %d is not a multiple of 4 (the 2-D rotary gives a quarter of it "
        "to rows and one to columns)",
        hd));
  }
  BackendArray<int32_t> window_bounds(backend), frame_bounds(backend);
  HAP_RETURN_IF_ERROR(
      window_bounds.Assign(layout.window_bounds.data(), layout.window_bounds.size()));
  HAP_RETURN_IF_ERROR(frame_bounds.Assign(layout.frame_bounds.data(), layout.frame_bounds.size()));
  AttentionArgs att;
  att.q = q.data();
  att.k = k.data();
  att.v = v.data();
  att.out = attn.data();
  att.n_q = att.n_kv = n;
  att.n_heads = att.n_kv_heads = heads;
  att.head_dim = hd;
  att.scale = 1.f / std::sqrt(static_cast<float>(hd));
  att.operands = attention_operands;
  const std::vector<int> full(cfg.fullatt_block_indexes.begin(), cfg.fullatt_block_indexes.end());
  for (int b = 0; b < static_cast<int>(w.blocks.size()); ++b) {
    if (CancellationRequested()) {
      return absl::CancelledError(absl::StrFormat("image encoding cancelled before block %d", b));
    }
    const QwenVisionBlockWeights& bw = w.blocks[b];
    HAP_RETURN_IF_ERROR(backend.RmsNorm(x.data(), bw.norm1.f32(), h.data(), n, d, kVisionRmsEps));
    float* qkv[3] = {q.data(), k.data(), v.data()};
    for (int i = 0; i < 3; ++i) {
      HAP_ASSIGN_OR_RETURN(const TensorView wi, Rows(bw.qkv_w, int64_t{i} * d, d));
      HAP_RETURN_IF_ERROR(
          backend.Linear(h.data(), wi, bw.qkv_b.f32() + int64_t{i} * d, qkv[i], n, kRows));
    }
    for (float* t : {q.data(), k.data()}) {
      rope.x = t;
      HAP_RETURN_IF_ERROR(backend.RopeAxes(rope));
    }
    // Full attention within each frame at fullatt_block_indexes, else within each window: one
    // variable-length attention over the segments.
    const bool full_block = std::find(full.begin(), full.end(), b) != full.end();
    const BackendArray<int32_t>& bounds = full_block ? frame_bounds : window_bounds;
    att.segment_bounds = bounds.data();
    att.n_segments = static_cast<int>(bounds.size()) - 1;
    HAP_RETURN_IF_ERROR(backend.Attention(att));
    HAP_RETURN_IF_ERROR(
        backend.Linear(attn.data(), bw.proj_w, bw.proj_b.f32(), h.data(), n, kRows));
    HAP_RETURN_IF_ERROR(backend.Add(x.data(), h.data(), int64_t{n} * d));
    HAP_RETURN_IF_ERROR(backend.RmsNorm(x.data(), bw.norm2.f32(), h.data(), n, d, kVisionRmsEps));
    HAP_RETURN_IF_ERROR(
        backend.Linear(h.data(), bw.gate_w, bw.gate_b.f32(), gate.data(), n, kRows));
    HAP_RETURN_IF_ERROR(backend.Linear(h.data(), bw.up_w, bw.up_b.f32(), up.data(), n, kRows));
    HAP_RETURN_IF_ERROR(backend.SiluMul(gate.data(), up.data(), int64_t{n} * ffn));
    HAP_RETURN_IF_ERROR(
        backend.Linear(gate.data(), bw.down_w, bw.down_b.f32(), h.data(), n, kRows));
    HAP_RETURN_IF_ERROR(backend.Add(x.data(), h.data(), int64_t{n} * d));
  }
  // The merger: RMSNorm, each merge unit's patches side by side as one row of d·unit, then
  // Linear, GELU, Linear to the language model's width.
  HAP_RETURN_IF_ERROR(
      backend.RmsNorm(x.data(), w.merger_norm.f32(), h.data(), n, d, kVisionRmsEps));
  const int wide = d * unit;
  const int out_d = cfg.out_hidden_size;
  BackendArray<float> mid(backend), merged(backend);
  HAP_RETURN_IF_ERROR(mid.Resize(static_cast<size_t>(n_units) * wide));
  HAP_RETURN_IF_ERROR(merged.Resize(static_cast<size_t>(n_units) * out_d));
  HAP_RETURN_IF_ERROR(
      backend.Linear(h.data(), w.merger_w1, w.merger_b1.f32(), mid.data(), n_units, kRows));
  HAP_RETURN_IF_ERROR(backend.Activate(Activation::kGelu, mid.data(), int64_t{n_units} * wide));
  HAP_RETURN_IF_ERROR(
      backend.Linear(mid.data(), w.merger_w2, w.merger_b2.f32(), merged.data(), n_units, kRows));
  // Back to the preprocessor's order.
  out->Rebind(backend);
  HAP_RETURN_IF_ERROR(out->Resize(static_cast<size_t>(n_units) * out_d));
  return backend.GatherRows(merged.data(), n_units, sizeof(float) * out_d, layout.inverse.data(),
                            n_units, out->data());
}

absl::StatusOr<std::vector<float>> RunQwenVision(const Backend& backend,
                                                 const Qwen25VLVisionConfig& cfg,
                                                 const QwenVisionWeights& w,
                                                 const std::vector<float>& pixels,
                                                 const std::vector<ImageGrid>& grids,
                                                 DType attention_operands) {
  const int64_t patch_len =
      int64_t{cfg.in_channels} * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size;
  if (pixels.size() % patch_len != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "vision tower: %d pixel values are not rows of %d", pixels.size(), patch_len));
  }
  BackendArray<float> in(backend), out(backend);
  HAP_RETURN_IF_ERROR(in.Assign(pixels.data(), pixels.size()));
  HAP_RETURN_IF_ERROR(RunQwenVisionInto(backend, cfg, w, in.data(),
                                        static_cast<int64_t>(pixels.size()) / patch_len, grids,
                                        attention_operands, &out));
  std::vector<float> result(out.size());
  HAP_RETURN_IF_ERROR(out.CopyTo(result.data()));
  return result;
}

}  // namespace hap
