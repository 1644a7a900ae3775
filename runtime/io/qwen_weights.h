// The tensors of a Qwen2.5-VL checkpoint (Qwen2_5_VLForConditionalGeneration) by name and
// shape, in the published names (visual.*, model.*, lm_head), and the newer names mapped onto
// them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

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

}  // namespace hap
