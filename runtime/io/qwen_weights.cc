// ExpectedQwen25VLTensors / CanonicalQwen25VLTensorName.
#include "runtime/io/qwen_weights.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/io/weights_internal.h"

namespace hap {

std::vector<ExpectedTensor> ExpectedQwen25VLTensors(const Qwen25VLConfig& cfg) {
  const Qwen25VLVisionConfig& v = cfg.vision;
  const Qwen25VLTextConfig& t = cfg.text;
  std::vector<ExpectedTensor> out;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    out.push_back({std::move(name), std::move(shape), false});
  };
  const int64_t vh = v.hidden_size, vi = v.intermediate_size;
  add("visual.patch_embed.proj.weight",
      {vh, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size});
  for (int i = 0; i < v.depth; ++i) {
    const std::string b = absl::StrCat("visual.blocks.", i, ".");
    add(b + "norm1.weight", {vh});
    add(b + "norm2.weight", {vh});
    add(b + "attn.qkv.weight", {3 * vh, vh});
    add(b + "attn.qkv.bias", {3 * vh});
    add(b + "attn.proj.weight", {vh, vh});
    add(b + "attn.proj.bias", {vh});
    add(b + "mlp.gate_proj.weight", {vi, vh});
    add(b + "mlp.gate_proj.bias", {vi});
    add(b + "mlp.up_proj.weight", {vi, vh});
    add(b + "mlp.up_proj.bias", {vi});
    add(b + "mlp.down_proj.weight", {vh, vi});
    add(b + "mlp.down_proj.bias", {vh});
  }
  const int64_t merged = vh * v.spatial_merge_size * v.spatial_merge_size;
  add("visual.merger.ln_q.weight", {vh});
  add("visual.merger.mlp.0.weight", {merged, merged});
  add("visual.merger.mlp.0.bias", {merged});
  add("visual.merger.mlp.2.weight", {v.out_hidden_size, merged});
  add("visual.merger.mlp.2.bias", {v.out_hidden_size});

  const int64_t h = t.hidden_size, hd = t.head_dim();
  const int64_t q = t.num_attention_heads * hd, kv = t.num_key_value_heads * hd;
  add("model.embed_tokens.weight", {t.vocab_size, h});
  for (int i = 0; i < t.num_hidden_layers; ++i) {
    const std::string l = absl::StrCat("model.layers.", i, ".");
    add(l + "input_layernorm.weight", {h});
    add(l + "self_attn.q_proj.weight", {q, h});
    add(l + "self_attn.q_proj.bias", {q});
    add(l + "self_attn.k_proj.weight", {kv, h});
    add(l + "self_attn.k_proj.bias", {kv});
    add(l + "self_attn.v_proj.weight", {kv, h});
    add(l + "self_attn.v_proj.bias", {kv});
    add(l + "self_attn.o_proj.weight", {h, q});
    add(l + "post_attention_layernorm.weight", {h});
    add(l + "mlp.gate_proj.weight", {t.intermediate_size, h});
    add(l + "mlp.up_proj.weight", {t.intermediate_size, h});
    add(l + "mlp.down_proj.weight", {h, t.intermediate_size});
  }
  add("model.norm.weight", {h});
  if (!t.tie_word_embeddings) add("lm_head.weight", {t.vocab_size, h});
  return out;
}

std::string CanonicalQwen25VLTensorName(std::string_view name) {
  for (const auto& [newer, published] :
       {std::pair<std::string_view, std::string_view>{"model.visual.", "visual."},
        {"model.language_model.", "model."}}) {
    if (name.substr(0, newer.size()) == newer) {
      return std::string(published) + std::string(name.substr(newer.size()));
    }
  }
  return std::string(name);
}

absl::StatusOr<std::unique_ptr<QwenWeights>> QwenWeights::Load(const std::string& model_dir,
                                                               const Qwen25VLConfig& cfg,
                                                               ModelParts parts) {
  std::unique_ptr<QwenWeights> w(new QwenWeights);
  w->parts_ = parts;
  HAP_ASSIGN_OR_RETURN(w->checkpoint_,
                       io_internal::OpenCheckpoint(model_dir, CanonicalQwen25VLTensorName,
                                                   ExpectedQwen25VLTensors(cfg), parts, "visual.",
                                                   ModelParts::kVision));
  Checkpoint& c = *w->checkpoint_;

  if (HasPart(parts, ModelParts::kVision)) {
    QwenVisionWeights& v = w->vision_;
    v.patch_w = c.Matrix("visual.patch_embed.proj.weight");
    for (int i = 0; i < cfg.vision.depth; ++i) {
      const std::string b = absl::StrCat("visual.blocks.", i, ".");
      QwenVisionBlockWeights k;
      k.norm1 = c.Vector(b + "norm1.weight");
      k.norm2 = c.Vector(b + "norm2.weight");
      k.qkv_w = c.Matrix(b + "attn.qkv.weight");
      k.qkv_b = c.Vector(b + "attn.qkv.bias");
      k.proj_w = c.Matrix(b + "attn.proj.weight");
      k.proj_b = c.Vector(b + "attn.proj.bias");
      k.gate_w = c.Matrix(b + "mlp.gate_proj.weight");
      k.gate_b = c.Vector(b + "mlp.gate_proj.bias");
      k.up_w = c.Matrix(b + "mlp.up_proj.weight");
      k.up_b = c.Vector(b + "mlp.up_proj.bias");
      k.down_w = c.Matrix(b + "mlp.down_proj.weight");
      k.down_b = c.Vector(b + "mlp.down_proj.bias");
      v.blocks.push_back(std::move(k));
    }
    v.merger_norm = c.Vector("visual.merger.ln_q.weight");
    v.merger_w1 = c.Matrix("visual.merger.mlp.0.weight");
    v.merger_b1 = c.Vector("visual.merger.mlp.0.bias");
    v.merger_w2 = c.Matrix("visual.merger.mlp.2.weight");
    v.merger_b2 = c.Vector("visual.merger.mlp.2.bias");
  }
  if (HasPart(parts, ModelParts::kLanguage)) {
    w->text_ =
        io_internal::ReadTextWeights(c, "model.", "lm_head.weight", cfg.text.num_hidden_layers,
                                     cfg.text.tie_word_embeddings, /*qkv_bias=*/true);
  }
  return w;
}

}  // namespace hap
