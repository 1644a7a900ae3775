// The model dimensions the pruning planner and methods need (decoder shape and the number of
// visual tokens one image contributes).
#pragma once

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace hap {

struct ModelDims {
  int n_layers = 32;    // L, decoder layers
  int d_model = 4096;   // D, hidden size
  int d_ffn = 11008;    // intermediate size of the SwiGLU MLP
  int n_heads = 32;     // H, query heads
  int n_kv_heads = 32;  // KV heads (GQA when < n_heads)
  int head_dim = 128;
  int n_visual_tokens = 576;  // V, visual tokens per image entering the LLM

  // LLaVA-1.5-7B (Vicuna-7B decoder, CLIP ViT-L/14-336 → 24×24 patches).
  static ModelDims Llava15_7B() { return ModelDims{}; }
  // Qwen2.5-VL-7B's Qwen2 decoder (28 layers, GQA 28/4) with `visual_tokens` from one image:
  // its count depends on the image's size (dynamic resolution).
  static ModelDims Qwen25VL_7B(int visual_tokens) {
    return ModelDims{28, 3584, 18944, 28, 4, 128, visual_tokens};
  }

  absl::Status Validate() const {
    if (n_layers <= 0 || d_model <= 0 || d_ffn <= 0 || n_heads <= 0 || n_kv_heads <= 0 ||
        head_dim <= 0 || n_visual_tokens <= 0 || n_heads % n_kv_heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad model dims: layers=", n_layers, " d_model=", d_model, " d_ffn=", d_ffn,
                       " heads=", n_heads, " kv_heads=", n_kv_heads, " head_dim=", head_dim,
                       " visual_tokens=", n_visual_tokens));
    }
    return absl::OkStatus();
  }
};

}  // namespace hap
