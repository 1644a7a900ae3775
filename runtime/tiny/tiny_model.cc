#include "runtime/tiny/tiny_model.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/image/clip_preprocess.h"
#include "runtime/io/config.h"
#include "runtime/io/side_files.h"
#include "runtime/text/tokenizer.h"
#include "runtime/tiny/tiny_checkpoint.h"
#include "runtime/tiny/tokenizer_json.h"
#include "runtime/tiny/train_tokenizer.h"

namespace hap {

absl::Status WriteTinyModel(const TinyModelOptions& o, const std::string& dir) {
  if (o.layers < 1 || o.hidden < 8 || o.heads < 1 || o.kv_heads < 1 || o.intermediate < 1 ||
      o.vision_layers < 1 || o.vision_hidden < 8 || o.vision_heads < 1 || o.shards < 1 ||
      o.image_size < 14 || o.sp_vocab < 362) {
    return absl::InvalidArgumentError(
        "sizes must be positive (layers, vision-layers, heads ≥ 1; hidden, vision-hidden ≥ 8; "
        "image-size ≥ 14; vocab ≥ 362, the corpus's 259 special and byte pieces + 103 "
        "characters; shards ≥ 1)");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create '", dir, "': ", ec.message()));
  const std::string tok_path = (std::filesystem::path(dir) / "tokenizer.model").string();
  HAP_RETURN_IF_ERROR(TrainTokenizer(o.corpus_path, tok_path, o.sp_vocab));
  HAP_ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::Load(tok_path));

  // Start from llava-1.5's config and shrink it.
  HAP_ASSIGN_OR_RETURN(LlavaConfig cfg, ParseLlavaConfig("{\"model_type\": \"llava\"}", "defaults"));
  cfg.vision.hidden_size = o.vision_hidden;
  cfg.vision.intermediate_size = o.vision_hidden * 4;
  cfg.vision.num_hidden_layers = o.vision_layers;
  cfg.vision.num_attention_heads = o.vision_heads;
  cfg.vision.image_size = o.image_size;
  cfg.vision.patch_size = 14;
  cfg.vision.projection_dim = o.vision_hidden;
  cfg.text.hidden_size = o.hidden;
  cfg.text.intermediate_size = o.intermediate;
  cfg.text.num_hidden_layers = o.layers;
  cfg.text.num_attention_heads = o.heads;
  cfg.text.num_key_value_heads = o.kv_heads;
  cfg.text.head_dim = o.hidden / o.heads;
  cfg.text.max_position_embeddings = 4096;
  cfg.text.rms_norm_eps = 1e-5f;
  // llava-hf appends <image> and <pad> after the SentencePiece vocabulary and pads to 64.
  const int sp_size = tokenizer->vocab_size();
  cfg.image_token_index = sp_size;
  cfg.text.pad_token_id = sp_size + 1;
  cfg.text.vocab_size = std::max((sp_size + 2 + 63) / 64 * 64, (o.model_vocab + 63) / 64 * 64);
  cfg.image_seq_length = cfg.num_visual_tokens();
  // Re-validate the edited config through the parser.
  HAP_ASSIGN_OR_RETURN(cfg, ParseLlavaConfig(LlavaConfigToJson(cfg), "make-tiny config"));
  HAP_RETURN_IF_ERROR(WriteRandomLlavaCheckpoint(cfg, dir, o.seed, o.dtype, o.shards, o.progress));

  // The processor, tokenizer and generation settings that make the directory a complete
  // llava-hf checkpoint.
  TokenizerSpecials specials;
  specials.vocab_size = sp_size;
  specials.unk_id = tokenizer->unk_id();
  specials.bos_id = tokenizer->bos_id();
  specials.eos_id = tokenizer->eos_id();
  specials.unk = tokenizer->IdToPiece(specials.unk_id);
  specials.bos = tokenizer->IdToPiece(specials.bos_id);
  specials.eos = tokenizer->IdToPiece(specials.eos_id);
  if (cfg.text.pad_token_id < sp_size) specials.pad = tokenizer->IdToPiece(cfg.text.pad_token_id);
  HAP_RETURN_IF_ERROR(
      WriteSideFiles(dir, cfg, ClipImageProcessorConfig(cfg.vision.image_size), specials));
  return WriteLlavaTokenizerJson(dir, cfg);
}

}  // namespace hap
