// WriteTinyQwen25VL: tokenizer first (its size sets the vocabulary), then config, weights and
// the processor and generation files.
#include "runtime/tiny/qwen_tiny.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "runtime/image/qwen2vl_preprocess.h"
#include "runtime/io/preprocessor_config.h"
#include "runtime/io/qwen_weights.h"
#include "runtime/tiny/bytelevel_bpe.h"

namespace hap {
namespace {

// The same scaling as the LLaVA writer (tiny_checkpoint.cc): unit-scale activations through
// deep random stacks, attention rows neither uniform nor one-hot.
TensorInit QwenInit(const ExpectedTensor& t, const Qwen25VLConfig& cfg) {
  const std::string& n = t.name;
  if (absl::EndsWith(n, ".bias")) return {0.0, 0.02};
  if (t.shape.size() == 1) return {1.0, 0.05};  // RMSNorm weights
  if (absl::EndsWith(n, "embed_tokens.weight")) return {0.0, 1.0};
  int64_t fan_in = 1;
  for (size_t i = 1; i < t.shape.size(); ++i) fan_in *= t.shape[i];
  double gain = 1.0;
  const bool vision = absl::StartsWith(n, "visual.blocks.");
  if (absl::StrContains(n, "attn.proj") || absl::StrContains(n, "o_proj") ||
      absl::StrContains(n, "down_proj")) {
    const int layers = vision ? cfg.vision.depth : cfg.text.num_hidden_layers;
    gain = 1.0 / std::sqrt(2.0 * layers);
  } else if (absl::StrContains(n, "q_proj") || absl::StrContains(n, "k_proj") ||
             absl::StrContains(n, "attn.qkv")) {
    gain = 1.25;
  } else if (absl::StrContains(n, "merger.mlp.2")) {
    gain = std::sqrt(2.0);  // after GELU
  }
  return {0.0, gain / std::sqrt(static_cast<double>(fan_in))};
}

}  // namespace

absl::StatusOr<Qwen25VLConfig> TinyQwenConfig(const TinyQwenOptions& o, int vocab_size) {
  Qwen25VLConfig c;
  c.vision.depth = o.vision_layers;
  c.vision.hidden_size = o.vision_hidden;
  c.vision.num_heads = o.vision_heads;
  c.vision.intermediate_size = o.vision_intermediate;
  c.vision.window_size = o.window_size;
  c.vision.fullatt_block_indexes = o.fullatt_blocks;
  c.vision.out_hidden_size = o.hidden;
  c.vision.tokens_per_second = 2;
  c.text.vocab_size = vocab_size;
  c.text.hidden_size = o.hidden;
  c.text.intermediate_size = o.intermediate;
  c.text.num_hidden_layers = o.layers;
  c.text.num_attention_heads = o.heads;
  c.text.num_key_value_heads = o.kv_heads;
  c.text.max_position_embeddings = 4096;
  c.text.rms_norm_eps = 1e-6f;
  c.text.mrope_section = o.mrope_section;
  // Qwen's special tokens follow the BPE vocabulary in QwenSpecialTokens' order.
  const std::vector<std::string>& specials = QwenSpecialTokens();
  auto id_of = [&](std::string_view token) {
    const int first = vocab_size - static_cast<int>(specials.size());
    return first +
           static_cast<int>(std::find(specials.begin(), specials.end(), token) - specials.begin());
  };
  c.text.bos_token_id = id_of("<|endoftext|>");
  c.text.eos_token_id = id_of("<|im_end|>");
  c.vision_start_token_id = id_of("<|vision_start|>");
  c.vision_end_token_id = id_of("<|vision_end|>");
  c.image_token_id = id_of("<|image_pad|>");
  c.video_token_id = id_of("<|video_pad|>");
  c.torch_dtype = TorchDTypeName(o.dtype);
  // Only what the parser accepts is written.
  return ParseQwen25VLConfig(Qwen25VLConfigToJson(c), "make-tiny config");
}

absl::Status WriteTinyQwen25VL(const TinyQwenOptions& o, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create '", dir, "': ", ec.message()));
  HAP_ASSIGN_OR_RETURN(const ByteLevelBpe bpe, TrainByteLevelBpe(o.corpus_path, o.merges));
  const int vocab = static_cast<int>(bpe.vocab.size() + QwenSpecialTokens().size());
  HAP_ASSIGN_OR_RETURN(const Qwen25VLConfig cfg, TinyQwenConfig(o, vocab));

  Qwen2VLImageProcessorConfig processor;
  processor.min_pixels = o.min_pixels;
  processor.max_pixels = o.max_pixels;
  const nlohmann::json generation = {
      {"bos_token_id", cfg.text.bos_token_id},
      {"eos_token_id", {cfg.text.eos_token_id, cfg.text.bos_token_id}},
      {"pad_token_id", cfg.text.bos_token_id}};
  const nlohmann::json chat = {{"chat_template", std::string(kQwen25VLChatTemplate)}};
  const std::pair<const char*, std::string> files[] = {
      {"config.json", Qwen25VLConfigToJson(cfg)},
      {"tokenizer.json", QwenTokenizerJson(bpe)},
      {"tokenizer_config.json", QwenTokenizerConfigJson(bpe, cfg.text.max_position_embeddings)},
      {"preprocessor_config.json", Qwen2VLPreprocessorConfigToJson(processor)},
      {"chat_template.json", chat.dump(2) + "\n"},
      {"generation_config.json", generation.dump(2) + "\n"},
  };
  for (const auto& [name, text] : files) {
    HAP_RETURN_IF_ERROR(WriteTextFile(absl::StrCat(dir, "/", name), text));
  }
  return WriteRandomTensors(
      ExpectedQwen25VLTensors(cfg), [&](const ExpectedTensor& t) { return QwenInit(t, cfg); }, dir,
      o.seed, o.dtype, o.shards, o.progress);
}

}  // namespace hap
