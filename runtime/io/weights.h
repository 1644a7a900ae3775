// LLaVA-1.5 weights from a llava-hf checkpoint (single or sharded safetensors), as views into
// the memory mapping: matrices (linear layers, token embeddings) stay in their stored dtype
// (F32, BF16 or F16) and are read as stored by the matmul; the small tensors ops read element
// by element (norms, biases, the vision embeddings) are converted to F32 once at load.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/config.h"
#include "runtime/io/safetensors.h"

namespace hap {

// A weight is a host tensor view; data is nullptr for an absent optional bias.
using Weight = TensorView;

// Linear weights are in HF layout: [out, in] row-major, stored dtype. Every other tensor is F32.
// D = vision hidden, I = intermediate.
struct ClipLayerWeights {
  Weight ln1_w, ln1_b;                  // [D]
  Weight q_w, q_b, k_w, k_b, v_w, v_b;  // [D, D], [D]
  Weight o_w, o_b;                      // [D, D], [D]
  Weight ln2_w, ln2_b;                  // [D]
  Weight fc1_w, fc1_b;                  // [I, D], [I]
  Weight fc2_w, fc2_b;                  // [D, I], [D]
};

struct VisionWeights {
  Weight patch_w;                        // [D, C, P, P] (conv without bias)
  Weight class_emb;                      // [D]
  Weight pos_emb;                        // [n_patches + 1, D]
  Weight pre_ln_w, pre_ln_b;             // [D]
  std::vector<ClipLayerWeights> layers;  // only the vision_layers_used() first layers
};

struct ProjectorWeights {
  Weight l1_w, l1_b;  // [Dt, Dv], [Dt]; biases absent when multimodal_projector_bias is false
  Weight l2_w, l2_b;  // [Dt, Dt], [Dt]
};

// Dt = text hidden, H / KV = query / key-value heads, hd = head_dim, I = intermediate.
// A LLaMA or Qwen2 decoder layer (Qwen2 adds the q, k and v biases).
struct LlamaLayerWeights {
  Weight attn_norm;      // [Dt]
  Weight q;              // [H * hd, Dt]
  Weight k, v;           // [KV * hd, Dt]
  Weight q_b, k_b, v_b;  // [H * hd], [KV * hd]: absent in LLaMA
  Weight o;          // [Dt, H * hd]
  Weight mlp_norm;   // [Dt]
  Weight gate, up;   // [I, Dt]
  Weight down;       // [Dt, I]
};

struct TextWeights {
  Weight embed;    // [vocab, Dt], stored dtype
  Weight norm;     // [Dt]
  Weight lm_head;  // [vocab, Dt]; the same data as embed when embeddings are tied
  std::vector<LlamaLayerWeights> layers;
};

// Every tensor of a llava-hf checkpoint for `cfg`, in legacy names (the names and order of
// tools/pytorch/llava_model.py's hf_state_dict(), without lm_head when embeddings are tied).
std::vector<ExpectedTensor> ExpectedLlavaTensors(const LlavaConfig& cfg);

// Maps the newer transformers names to the legacy ones: model.language_model.* ->
// language_model.model.*, model.vision_tower.* -> vision_tower.*, model.multi_modal_projector.*
// -> multi_modal_projector.*, lm_head.weight -> language_model.lm_head.weight.
std::string CanonicalLlavaTensorName(std::string_view name);

// Which parts of the model a process loads: the encoder service needs only the vision tower and
// projector, prefill and decode only the language model; hapctl loads both.
enum class ModelParts { kVision = 1, kLanguage = 2, kAll = 3 };
bool HasPart(ModelParts parts, ModelParts part);
// "vision", "language", "all" (and back: InvalidArgument naming the accepted values).
std::string_view ModelPartsName(ModelParts parts);
absl::StatusOr<ModelParts> ParseModelParts(std::string_view name);

class LlavaWeights {
 public:
  // Reads model_dir/model.safetensors, or the shards listed by model.safetensors.index.json.
  // Only the tensors of `parts` are checked and mapped into views; the others stay untouched
  // on disk (the files are mapped, so they cost address space, not memory).
  static absl::StatusOr<std::unique_ptr<LlavaWeights>> Load(const std::string& model_dir,
                                                            const LlavaConfig& cfg,
                                                            ModelParts parts = ModelParts::kAll);
  ~LlavaWeights();
  LlavaWeights(const LlavaWeights&) = delete;
  LlavaWeights& operator=(const LlavaWeights&) = delete;

  const VisionWeights& vision() const { return vision_; }
  const ProjectorWeights& projector() const { return projector_; }
  const TextWeights& text() const { return text_; }
  ModelParts parts() const { return parts_; }
  // Bytes of F32 buffers this object owns (converted or realigned tensors).
  int64_t converted_bytes() const { return checkpoint_->converted_bytes(); }
  // Bytes of the loaded parts' tensors as stored in the checkpoint (what their views read).
  int64_t stored_bytes() const { return checkpoint_->stored_bytes(); }
  // Bytes of the safetensors files mapped (and kept mapped for the object's lifetime).
  int64_t mapped_bytes() const { return checkpoint_->mapped_bytes(); }

 private:
  LlavaWeights() = default;

  std::unique_ptr<Checkpoint> checkpoint_;
  VisionWeights vision_;
  ProjectorWeights projector_;
  TextWeights text_;
  ModelParts parts_ = ModelParts::kAll;
};

}  // namespace hap
