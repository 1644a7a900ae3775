// ExpectedQwen25VLTensors / CanonicalQwen25VLTensorName.
#include "runtime/io/qwen_weights.h"

#include <utility>

#include "absl/strings/str_cat.h"

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

}  // namespace hap
