// hapctl make-tiny: writes a random-weight checkpoint in the exact llava-hf layout (config.json,
// safetensors — sharded with an index when asked — and a SentencePiece tokenizer.model trained
// on the project's corpus), for tests and benchmarks.
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "runtime/common/status_macros.h"
#include "runtime/io/config.h"
#include "runtime/io/tiny_checkpoint.h"
#include "runtime/text/tokenizer.h"
#include "tools/hapctl/command.h"
#include "tools/hapctl/flags.h"

namespace hap::cli {
namespace {

absl::Status MakeTiny(const Flags& flags) {
  HAP_ASSIGN_OR_RETURN(std::string out, flags.Required("out"));
  HAP_ASSIGN_OR_RETURN(uint64_t seed, flags.Uint64("seed", 0));
  HAP_ASSIGN_OR_RETURN(int64_t layers, flags.Int("layers", 2));
  HAP_ASSIGN_OR_RETURN(int64_t hidden, flags.Int("hidden", 64));
  HAP_ASSIGN_OR_RETURN(int64_t heads, flags.Int("heads", 4));
  HAP_ASSIGN_OR_RETURN(int64_t kv_heads, flags.Int("kv-heads", heads));
  // Default MLP width: 11/4 of hidden rounded to 16 (2816 for hidden 1024).
  HAP_ASSIGN_OR_RETURN(int64_t intermediate, flags.Int("intermediate", (hidden * 11 / 4 + 15) / 16 * 16));
  HAP_ASSIGN_OR_RETURN(int64_t image_size, flags.Int("image-size", 56));
  HAP_ASSIGN_OR_RETURN(int64_t vision_layers, flags.Int("vision-layers", 2));
  HAP_ASSIGN_OR_RETURN(int64_t vision_hidden, flags.Int("vision-hidden", 64));
  HAP_ASSIGN_OR_RETURN(int64_t vision_heads, flags.Int("vision-heads", 4));
  HAP_ASSIGN_OR_RETURN(int64_t sp_vocab, flags.Int("vocab", 512));
  HAP_ASSIGN_OR_RETURN(int64_t shards, flags.Int("shards", 1));
  const std::string dtype_name = flags.GetOr("dtype", "f32");
  DType dtype;
  if (dtype_name == "f32") {
    dtype = DType::kF32;
  } else if (dtype_name == "bf16") {
    dtype = DType::kBF16;
  } else if (dtype_name == "f16") {
    dtype = DType::kF16;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype must be f32, bf16 or f16, got '", dtype_name, "'"));
  }
  if (layers < 1 || hidden < 8 || heads < 1 || kv_heads < 1 || intermediate < 1 ||
      vision_layers < 1 || vision_hidden < 8 || vision_heads < 1 || shards < 1 ||
      image_size < 14 || sp_vocab < 362) {
    return absl::InvalidArgumentError(
        "sizes must be positive (layers, vision-layers, heads ≥ 1; hidden, vision-hidden ≥ 8; "
        "image-size ≥ 14; vocab ≥ 362, the corpus's 259 special and byte pieces + 103 characters; "
        "shards ≥ 1)");
  }
  std::filesystem::create_directories(out);

  const std::string corpus = (std::filesystem::path(HAP_SOURCE_DIR) / "data/tokenizer/corpus.txt").string();
  const std::string tok_path = (std::filesystem::path(out) / "tokenizer.model").string();
  HAP_RETURN_IF_ERROR(TrainTokenizer(corpus, tok_path, static_cast<int>(sp_vocab)));
  HAP_ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::Load(tok_path));

  // Start from llava-1.5's config and shrink it.
  HAP_ASSIGN_OR_RETURN(LlavaConfig cfg, ParseLlavaConfig("{\"model_type\": \"llava\"}", "defaults"));
  cfg.vision.hidden_size = static_cast<int>(vision_hidden);
  cfg.vision.intermediate_size = static_cast<int>(vision_hidden * 4);
  cfg.vision.num_hidden_layers = static_cast<int>(vision_layers);
  cfg.vision.num_attention_heads = static_cast<int>(vision_heads);
  cfg.vision.image_size = static_cast<int>(image_size);
  cfg.vision.patch_size = 14;
  cfg.vision.projection_dim = static_cast<int>(vision_hidden);
  cfg.text.hidden_size = static_cast<int>(hidden);
  cfg.text.intermediate_size = static_cast<int>(intermediate);
  cfg.text.num_hidden_layers = static_cast<int>(layers);
  cfg.text.num_attention_heads = static_cast<int>(heads);
  cfg.text.num_key_value_heads = static_cast<int>(kv_heads);
  cfg.text.head_dim = static_cast<int>(hidden / heads);
  cfg.text.max_position_embeddings = 4096;
  cfg.text.rms_norm_eps = 1e-5f;
  // llava-hf appends <image> and <pad> after the SentencePiece vocabulary and pads to 64.
  const int sp_size = tokenizer->vocab_size();
  cfg.image_token_index = sp_size;
  cfg.text.pad_token_id = sp_size + 1;
  cfg.text.vocab_size = (sp_size + 2 + 63) / 64 * 64;
  cfg.image_seq_length = cfg.num_visual_tokens();
  // Re-validate the edited config through the parser.
  HAP_ASSIGN_OR_RETURN(cfg, ParseLlavaConfig(LlavaConfigToJson(cfg), "make-tiny config"));
  HAP_RETURN_IF_ERROR(WriteRandomLlavaCheckpoint(cfg, out, seed, dtype, static_cast<int>(shards)));
  std::printf("wrote %s: %lld decoder layers, hidden %lld, %lld/%lld heads, %d visual tokens, %s%s\n",
              out.c_str(), static_cast<long long>(layers), static_cast<long long>(hidden),
              static_cast<long long>(heads), static_cast<long long>(kv_heads),
              cfg.num_visual_tokens(), dtype_name.c_str(),
              shards > 1 ? absl::StrCat(", ", shards, " shards").c_str() : "");
  return absl::OkStatus();
}

int CmdMakeTiny(const std::vector<std::string>& args) {
  auto flags = Flags::Parse(args,
                            {"out", "seed", "layers", "hidden", "heads", "kv-heads", "intermediate",
                             "image-size", "vision-layers", "vision-hidden", "vision-heads",
                             "vocab", "dtype", "shards"},
                            {});
  if (!flags.ok()) return Fail("make-tiny", flags.status());
  if (absl::Status s = MakeTiny(*flags); !s.ok()) return Fail("make-tiny", s);
  return 0;
}

}  // namespace

HAP_COMMAND(make-tiny, "Write a random-weight llava-hf checkpoint (tests, benchmarks)", CmdMakeTiny);

}  // namespace hap::cli
