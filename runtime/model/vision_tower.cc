#include "runtime/model/vision_tower.h"

#include <cmath>
#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "runtime/model/cancellation.h"

namespace hap {

namespace {

// The tower up to its feature layer: *x_out = its output F32 [n, d] (CLS first) in the backend's
// memory; with feature_layer, that layer's Q, K and shape (its output is *x_out: the caller moves
// it there when done with it).
absl::Status RunTower(const Backend& backend, const LlavaConfig& cfg, const VisionWeights& w,
                      const float* pixels, VisionFeatureLayer* feature_layer,
                      DType attention_operands, BackendArray<float>* x_out) {
  const VisionConfig& vc = cfg.vision;
  const int d = vc.hidden_size;
  const int p = vc.patch_size;
  const int grid = vc.image_size / p;
  const int n_patches = grid * grid;
  const int n = n_patches + 1;
  const int c = vc.num_channels;
  const int patch_len = c * p * p;
  const int heads = vc.num_attention_heads;
  const int hd = d / heads;
  const int ffn = vc.intermediate_size;

  // im2col: patches F32 [n_patches, c·p·p] in the conv weight's (c, ky, kx) order.
  std::vector<float> patches(static_cast<size_t>(n_patches) * patch_len);
  for (int gy = 0; gy < grid; ++gy) {
    for (int gx = 0; gx < grid; ++gx) {
      float* dst = patches.data() + static_cast<int64_t>(gy * grid + gx) * patch_len;
      for (int ch = 0; ch < c; ++ch) {
        for (int ky = 0; ky < p; ++ky) {
          const float* src = pixels + (static_cast<int64_t>(ch) * vc.image_size + gy * p + ky) *
                                          vc.image_size + gx * p;
          for (int kx = 0; kx < p; ++kx) *dst++ = src[kx];
        }
      }
    }
  }
  // x F32 [n, d] in the backend's memory: row 0 = class embedding, rows 1.. = patch
  // embeddings; + position embeddings.
  BackendArray<float> patches_dev(backend), x(backend);
  HAP_RETURN_IF_ERROR(patches_dev.Assign(patches.data(), patches.size()));
  HAP_RETURN_IF_ERROR(x.Resize(static_cast<size_t>(n) * d));
  TensorView patch_w = w.patch_w;  // the conv kernel [d, c, p, p] as the matrix [d, c·p·p]
  patch_w.shape = {d, patch_len};
  HAP_RETURN_IF_ERROR(backend.Linear(patches_dev.data(), patch_w, nullptr, x.data() + d,
                                     n_patches, LinearRows::kOneSequence));
  HAP_RETURN_IF_ERROR(backend.Copy(x.data(), w.class_emb.f32(), sizeof(float) * d));
  HAP_RETURN_IF_ERROR(backend.Add(x.data(), w.pos_emb.f32(), static_cast<int64_t>(n) * d));
  HAP_RETURN_IF_ERROR(backend.LayerNorm(x.data(), w.pre_ln_w.f32(), w.pre_ln_b.f32(), x.data(),
                                        n, d, vc.layer_norm_eps));

  // The layers as one planned step (kernels/step.h), so a device backend can fuse them: x in and
  // out, q, k and v bound back to back in one buffer (a device runs their products as one, and
  // VisionZip reads the feature layer's q and k after the run), the rest scratch; a Call before
  // each layer checks for cancellation.
  const int n_layers = static_cast<int>(w.layers.size());
  const int64_t rows_d = static_cast<int64_t>(n) * d;
  BackendArray<float> qkv(backend);  // F32 [3, n, d]: q, k, v
  HAP_RETURN_IF_ERROR(qkv.Resize(static_cast<size_t>(3 * rows_d)));
  StepDesc desc(absl::StrFormat("vision tower, %d layers, %d rows", n_layers, n));
  const StepValueId vx = desc.Bound("x", StepElem::kF32, rows_d);
  const StepValueId vq = desc.Bound("q", StepElem::kF32, rows_d);
  const StepValueId vk = desc.Bound("k", StepElem::kF32, rows_d);
  const StepValueId vv = desc.Bound("v", StepElem::kF32, rows_d);
  const StepValueId vh = desc.Scratch("h", StepElem::kF32, rows_d);
  const StepValueId vattn = desc.Scratch("attn", StepElem::kF32, rows_d);
  const StepValueId vproj = desc.Scratch("proj", StepElem::kF32, rows_d);
  const StepValueId vmlp = desc.Scratch("mlp", StepElem::kF32, static_cast<int64_t>(n) * ffn);
  const Activation act = vc.hidden_act == "quick_gelu" ? Activation::kQuickGelu : Activation::kGelu;
  constexpr LinearRows kRows = LinearRows::kOneSequence;
  for (int l = 0; l < n_layers; ++l) {
    const ClipLayerWeights& lw = w.layers[l];
    desc.Add(step_op::Call{l, /*listed=*/true, {}});
    // Self-attention block (pre-LN).
    desc.Add(step_op::LayerNorm{vx, vh, lw.ln1_w.f32(), lw.ln1_b.f32(), n, d, vc.layer_norm_eps});
    desc.Add(step_op::Linear{vh, vq, lw.q_w, lw.q_b.f32(), n, kRows});
    desc.Add(step_op::Linear{vh, vk, lw.k_w, lw.k_b.f32(), n, kRows});
    desc.Add(step_op::Linear{vh, vv, lw.v_w, lw.v_b.f32(), n, kRows});
    step_op::Attention a{vq, vk, vv, vattn, kNoStepValue, {}};
    a.shape.n_q = a.shape.n_kv = n;
    a.shape.n_heads = a.shape.n_kv_heads = heads;
    a.shape.head_dim = hd;
    a.shape.scale = 1.f / std::sqrt(static_cast<float>(hd));
    a.shape.operands = attention_operands;
    desc.Add(a);
    desc.Add(step_op::Linear{vattn, vproj, lw.o_w, lw.o_b.f32(), n, kRows});
    desc.Add(step_op::Add{vx, vproj, rows_d});
    // MLP block.
    desc.Add(step_op::LayerNorm{vx, vh, lw.ln2_w.f32(), lw.ln2_b.f32(), n, d, vc.layer_norm_eps});
    desc.Add(step_op::Linear{vh, vmlp, lw.fc1_w, lw.fc1_b.f32(), n, kRows});
    desc.Add(step_op::Activate{act, vmlp, static_cast<int64_t>(n) * ffn});
    desc.Add(step_op::Linear{vmlp, vproj, lw.fc2_w, lw.fc2_b.f32(), n, kRows});
    desc.Add(step_op::Add{vx, vproj, rows_d});
  }
  HAP_ASSIGN_OR_RETURN(std::unique_ptr<PlannedStep> plan, backend.Plan(std::move(desc)));
  BackendArray<uint8_t> workspace(backend);
  HAP_RETURN_IF_ERROR(workspace.Resize(plan->workspace_bytes()));
  void* bound[4] = {x.data(), qkv.data(), qkv.data() + rows_d, qkv.data() + 2 * rows_d};
  const StepCallFn call = [&](int l) -> absl::StatusOr<StepControl> {
    if (CancellationRequested()) {
      return absl::CancelledError(absl::StrFormat("image encoding cancelled before layer %d", l));
    }
    return StepControl::kContinue;
  };
  StepBindings bindings;
  bindings.bound = bound;
  bindings.workspace = workspace.data();
  bindings.call = &call;
  HAP_RETURN_IF_ERROR(plan->Run(bindings).status());
  if (feature_layer != nullptr && n_layers > 0) {
    // The last layer's Q and K, for VisionZip.
    feature_layer->n_tokens = n;
    feature_layer->n_heads = heads;
    feature_layer->head_dim = hd;
    feature_layer->scale = 1.f / std::sqrt(static_cast<float>(hd));
    for (auto [dst, src] :
         {std::pair{&feature_layer->q, qkv.data()}, {&feature_layer->k, qkv.data() + rows_d}}) {
      dst->Rebind(backend);
      HAP_RETURN_IF_ERROR(dst->Resize(static_cast<size_t>(rows_d)));
      HAP_RETURN_IF_ERROR(backend.Copy(dst->data(), src, sizeof(float) * rows_d));
    }
  }
  *x_out = std::move(x);
  return absl::OkStatus();
}

// The first row of the selected features: "default" drops CLS, "full" keeps it.
int FirstFeatureRow(const LlavaConfig& cfg) {
  return cfg.vision_feature_select_strategy == "full" ? 0 : 1;
}

// features F32 [n, dv] in the backend's memory → image embeddings on the host.
// The projector over n feature rows in the backend's memory, into `out` [n, text.hidden].
absl::Status ProjectRowsInto(const Backend& backend, const LlavaConfig& cfg,
                             const ProjectorWeights& w, const float* features, int n,
                             BackendArray<float>* out) {
  const int dt = cfg.text.hidden_size;  // the projector's input width comes with w.l1_w
  BackendArray<float> h(backend);       // [n, dt]
  HAP_RETURN_IF_ERROR(h.Resize(static_cast<size_t>(n) * dt));
  out->Rebind(backend);
  HAP_RETURN_IF_ERROR(out->Resize(static_cast<size_t>(n) * dt));
  HAP_RETURN_IF_ERROR(
      backend.Linear(features, w.l1_w, w.l1_b.f32(), h.data(), n, LinearRows::kOneSequence));
  const Activation act =
      cfg.projector_hidden_act == "gelu" ? Activation::kGelu : Activation::kGeluTanh;
  HAP_RETURN_IF_ERROR(backend.Activate(act, h.data(), static_cast<int64_t>(n) * dt));
  return backend.Linear(h.data(), w.l2_w, w.l2_b.f32(), out->data(), n, LinearRows::kOneSequence);
}

absl::StatusOr<std::vector<float>> ProjectRows(const Backend& backend, const LlavaConfig& cfg,
                                               const ProjectorWeights& w, const float* features,
                                               int n) {
  BackendArray<float> out(backend);
  HAP_RETURN_IF_ERROR(ProjectRowsInto(backend, cfg, w, features, n, &out));
  std::vector<float> result(out.size());
  HAP_RETURN_IF_ERROR(out.CopyTo(result.data()));
  return result;
}

}  // namespace

absl::StatusOr<std::vector<float>> RunVisionTower(const Backend& backend, const LlavaConfig& cfg,
                                                  const VisionWeights& w, const float* pixels,
                                                  VisionFeatureLayer* feature_layer,
                                                  DType attention_operands) {
  BackendArray<float> x(backend);
  HAP_RETURN_IF_ERROR(RunTower(backend, cfg, w, pixels, feature_layer, attention_operands, &x));
  const size_t first = static_cast<size_t>(FirstFeatureRow(cfg)) * cfg.vision.hidden_size;
  std::vector<float> out(x.size() - first);
  HAP_RETURN_IF_ERROR(backend.CopyToHost(out.data(), x.data() + first, sizeof(float) * out.size()));
  if (feature_layer != nullptr && feature_layer->n_tokens > 0) feature_layer->hidden = std::move(x);
  return out;
}

absl::Status RunVisionToEmbeddingsInto(const Backend& backend, const LlavaConfig& cfg,
                                       const VisionWeights& w, const ProjectorWeights& projector,
                                       const float* pixels, DType attention_operands,
                                       BackendArray<float>* out) {
  BackendArray<float> x(backend);
  HAP_RETURN_IF_ERROR(RunTower(backend, cfg, w, pixels, nullptr, attention_operands, &x));
  const int first = FirstFeatureRow(cfg);
  const int n = static_cast<int>(x.size() / cfg.vision.hidden_size) - first;
  return ProjectRowsInto(backend, cfg, projector,
                         x.data() + static_cast<int64_t>(first) * cfg.vision.hidden_size, n, out);
}

absl::StatusOr<std::vector<float>> RunVisionToEmbeddings(
    const Backend& backend, const LlavaConfig& cfg, const VisionWeights& w,
    const ProjectorWeights& projector, const float* pixels, DType attention_operands) {
  BackendArray<float> out(backend);
  HAP_RETURN_IF_ERROR(
      RunVisionToEmbeddingsInto(backend, cfg, w, projector, pixels, attention_operands, &out));
  std::vector<float> result(out.size());
  HAP_RETURN_IF_ERROR(out.CopyTo(result.data()));
  return result;
}

absl::StatusOr<std::vector<float>> RunProjector(const Backend& backend, const LlavaConfig& cfg,
                                                const ProjectorWeights& w, const float* features,
                                                int n) {
  const int64_t dv = w.l1_w.shape[1];
  BackendArray<float> in(backend);  // [n, dv]
  HAP_RETURN_IF_ERROR(in.Assign(features, static_cast<size_t>(n) * dv));
  return ProjectRows(backend, cfg, w, in.data(), n);
}

}  // namespace hap
