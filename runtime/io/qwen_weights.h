// The tensors of a Qwen2.5-VL checkpoint (Qwen2_5_VLForConditionalGeneration) by name and
// shape, in the published names (visual.*, model.*, lm_head), and the newer names mapped onto
// them.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/qwen_config.h"
#include "runtime/io/weights.h"

namespace hap {

// Vision tower: patch_embed.proj [hidden, 3, T, P, P] (no bias); per block norm1/norm2
// (RMSNorm), attn.qkv [3 hidden, hidden] + bias, attn.proj + bias, mlp.gate_proj/up_proj
// [intermediate, hidden] + bias, mlp.down_proj + bias; merger.ln_q, merger.mlp.0
// [hidden m^2, hidden m^2] + bias, merger.mlp.2 [out_hidden, hidden m^2] + bias.
// Language model: model.embed_tokens, per layer input_layernorm, self_attn.q/k/v_proj + bias,
// self_attn.o_proj (no bias), post_attention_layernorm, mlp.gate/up/down_proj (no bias),
// model.norm, and lm_head unless the embeddings are tied.
std::vector<ExpectedTensor> ExpectedQwen25VLTensors(const Qwen25VLConfig& cfg);

// transformers >= 4.52 names: model.visual.* -> visual.*, model.language_model.* -> model.*;
// anything else unchanged.
std::string CanonicalQwen25VLTensorName(std::string_view name);

// One vision block. D = vision hidden, I = its intermediate size. Matrices in their stored dtype,
// the rest F32.
struct QwenVisionBlockWeights {
  Weight norm1, norm2;    // [D] (RMSNorm)
  Weight qkv_w, qkv_b;    // [3 D, D], [3 D]: q, k, v stacked by rows
  Weight proj_w, proj_b;  // [D, D], [D]
  Weight gate_w, gate_b;  // [I, D], [I]
  Weight up_w, up_b;      // [I, D], [I]
  Weight down_w, down_b;  // [D, I], [D]
};

struct QwenVisionWeights {
  Weight patch_w;  // [D, C, T, P, P] (Conv3d without bias), stored dtype
  std::vector<QwenVisionBlockWeights> blocks;
  Weight merger_norm;           // [D] (RMSNorm, ln_q)
  Weight merger_w1, merger_b1;  // [D m^2, D m^2], [D m^2]
  Weight merger_w2, merger_b2;  // [out_hidden, D m^2], [out_hidden]
};

class QwenWeights {
 public:
  // Reads model_dir's safetensors (published or newer names) and checks every tensor of `parts`
  // (visual.* is the vision part, the rest the language model) by name and shape first.
  static absl::StatusOr<std::unique_ptr<QwenWeights>> Load(const std::string& model_dir,
                                                           const Qwen25VLConfig& cfg,
                                                           ModelParts parts = ModelParts::kAll);
  QwenWeights(const QwenWeights&) = delete;
  QwenWeights& operator=(const QwenWeights&) = delete;

  const QwenVisionWeights& vision() const { return vision_; }
  const TextWeights& text() const { return text_; }
  ModelParts parts() const { return parts_; }
  const Checkpoint& checkpoint() const { return *checkpoint_; }

 private:
  QwenWeights() = default;
  std::unique_ptr<Checkpoint> checkpoint_;
  QwenVisionWeights vision_;
  TextWeights text_;
  ModelParts parts_ = ModelParts::kAll;
};

}  // namespace hap
