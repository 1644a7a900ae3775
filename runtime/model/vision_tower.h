// The CLIP ViT vision tower and the LLaVA projector.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "runtime/io/config.h"
#include "runtime/io/weights.h"

namespace hap {

// What the last layer the tower runs (the feature layer) computed, kept for VisionZip in the
// memory of the backend that ran the tower (no copy to the host).
struct VisionFeatureLayer {
  int n_tokens = 0;  // patches + 1 (token 0 is CLS)
  int n_heads = 0;
  int head_dim = 0;
  float scale = 0.f;
  BackendArray<float> q;       // F32 [n_tokens, hidden], with bias
  BackendArray<float> k;       // F32 [n_tokens, hidden], with bias
  BackendArray<float> hidden;  // F32 [n_tokens, hidden]: the layer's output (incl. CLS)
};

// pixels: F32 [3, image_size, image_size] (CLIP-normalised). Returns the selected features
// F32 [num_visual_tokens, vision.hidden_size] at vision_feature_layer. When feature_layer is
// non-null it receives the feature layer's Q, K and output (the tower's own buffers, moved).
// attention_operands: AttentionArgs::operands of its attention (ModelOptions::attention_dtype).
absl::StatusOr<std::vector<float>> RunVisionTower(const Backend& backend, const LlavaConfig& cfg,
                                                  const VisionWeights& w, const float* pixels,
                                                  VisionFeatureLayer* feature_layer,
                                                  DType attention_operands = DType::kF32);

// RunVisionTower then RunProjector, the selected features handed over in the backend's memory
// (on a device: no trip through the host): image embeddings F32 [num_visual_tokens,
// text.hidden_size], on the host.
absl::StatusOr<std::vector<float>> RunVisionToEmbeddings(
    const Backend& backend, const LlavaConfig& cfg, const VisionWeights& w,
    const ProjectorWeights& projector, const float* pixels, DType attention_operands = DType::kF32);
// The same, the embeddings left in the backend's memory: `out` F32 [num_visual_tokens,
// text.hidden_size] (resized).
absl::Status RunVisionToEmbeddingsInto(const Backend& backend, const LlavaConfig& cfg,
                                       const VisionWeights& w, const ProjectorWeights& projector,
                                       const float* pixels, DType attention_operands,
                                       BackendArray<float>* out);

// features F32 [n, vision.hidden] → image embeddings F32 [n, text.hidden]
// (linear_1 → GELU → linear_2).
absl::StatusOr<std::vector<float>> RunProjector(const Backend& backend, const LlavaConfig& cfg,
                                                const ProjectorWeights& w,
                                                const float* features, int n);

}  // namespace hap
