// hapctl make-tiny: writes a random-weight checkpoint in the exact llava-hf layout (config.json,
// safetensors — sharded with an index when asked —, a SentencePiece tokenizer.model trained on
// the project's corpus, and preprocessor_config.json, processor_config.json, chat_template.json,
// tokenizer_config.json, special_tokens_map.json, generation_config.json), for tests and
// benchmarks. --family qwen2.5-vl writes a Qwen2.5-VL directory instead (runtime/tiny/qwen_tiny.h).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/io/model_dir.h"
#include "runtime/tiny/qwen_tiny.h"
#include "runtime/tiny/tiny_model.h"
#include "tools/hapctl/command.h"
#include "tools/hapctl/flags.h"

namespace hap::cli {
namespace {

absl::StatusOr<DType> DTypeFlag(const Flags& flags) {
  const std::string name = flags.GetOr("dtype", "f32");
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  if (name == "f16") return DType::kF16;
  return absl::InvalidArgumentError(
      absl::StrCat("--dtype must be f32, bf16 or f16, got '", name, "'"));
}

// --family qwen2.5-vl: the same size flags on a Qwen2.5-VL checkpoint.
absl::Status MakeTinyQwen(const Flags& flags, const std::string& out) {
  TinyQwenOptions o;
  HAP_ASSIGN_OR_RETURN(o.seed, flags.Uint64("seed", 0));
  auto int_flag = [&](const char* name, int fallback, int* dst) -> absl::Status {
    HAP_ASSIGN_OR_RETURN(int64_t v, flags.Int(name, fallback));
    if (v < 0 || v > (1 << 20))
      return absl::InvalidArgumentError(absl::StrCat("--", name, " out of range"));
    *dst = static_cast<int>(v);
    return absl::OkStatus();
  };
  HAP_RETURN_IF_ERROR(int_flag("layers", o.layers, &o.layers));
  HAP_RETURN_IF_ERROR(int_flag("hidden", o.hidden, &o.hidden));
  HAP_RETURN_IF_ERROR(int_flag("heads", o.heads, &o.heads));
  HAP_RETURN_IF_ERROR(int_flag("kv-heads", o.kv_heads, &o.kv_heads));
  HAP_RETURN_IF_ERROR(int_flag("intermediate", o.intermediate, &o.intermediate));
  HAP_RETURN_IF_ERROR(int_flag("vision-layers", o.vision_layers, &o.vision_layers));
  HAP_RETURN_IF_ERROR(int_flag("vision-hidden", o.vision_hidden, &o.vision_hidden));
  HAP_RETURN_IF_ERROR(int_flag("vision-heads", o.vision_heads, &o.vision_heads));
  HAP_RETURN_IF_ERROR(int_flag("vocab", o.merges + 256, &o.merges));
  o.merges -= 256;  // --vocab counts the 256 byte tokens the merges start from
  HAP_RETURN_IF_ERROR(int_flag("shards", 1, &o.shards));
  if (o.heads <= 0 || o.hidden % o.heads != 0 || (o.hidden / o.heads) % 2 != 0) {
    return absl::InvalidArgumentError("--heads must divide --hidden into heads of even width");
  }
  // Qwen2.5-VL's 16/24/24 split of the rotary pairs, scaled to this head width.
  const int pairs = o.hidden / o.heads / 2;
  const int t = std::max(1, pairs / 4);
  o.mrope_section = {t, (pairs - t) / 2, pairs - t - (pairs - t) / 2};
  // Full attention on every other block, the last one included.
  o.fullatt_blocks.clear();
  for (int i = 1; i < o.vision_layers; i += 2) o.fullatt_blocks.push_back(i);
  o.vision_intermediate = o.vision_hidden * 2;
  HAP_ASSIGN_OR_RETURN(o.dtype, DTypeFlag(flags));
  o.corpus_path = flags.GetOr("corpus", TokenizerCorpusPath());
  HAP_RETURN_IF_ERROR(WriteTinyQwen25VL(o, out));
  std::printf("wrote %s: Qwen2.5-VL, %d decoder layers, hidden %d, %d/%d heads, %d vision blocks\n",
              out.c_str(), o.layers, o.hidden, o.heads, o.kv_heads, o.vision_layers);
  return absl::OkStatus();
}

absl::Status MakeTiny(const Flags& flags) {
  HAP_ASSIGN_OR_RETURN(std::string out, flags.Required("out"));
  const std::string family = flags.GetOr("family", "llava");
  if (family == "qwen2.5-vl") return MakeTinyQwen(flags, out);
  if (family != "llava") {
    return absl::InvalidArgumentError(
        absl::StrCat("--family must be llava or qwen2.5-vl, got '", family, "'"));
  }
  TinyModelOptions o;
  HAP_ASSIGN_OR_RETURN(o.seed, flags.Uint64("seed", 0));
  auto int_flag = [&](const char* name, int fallback, int* dst) -> absl::Status {
    HAP_ASSIGN_OR_RETURN(int64_t v, flags.Int(name, fallback));
    if (v < 0 || v > (1 << 20)) return absl::InvalidArgumentError(absl::StrCat("--", name, " out of range"));
    *dst = static_cast<int>(v);
    return absl::OkStatus();
  };
  HAP_RETURN_IF_ERROR(int_flag("layers", 2, &o.layers));
  HAP_RETURN_IF_ERROR(int_flag("hidden", 64, &o.hidden));
  HAP_RETURN_IF_ERROR(int_flag("heads", 4, &o.heads));
  HAP_RETURN_IF_ERROR(int_flag("kv-heads", o.heads, &o.kv_heads));
  // Default MLP width: 11/4 of hidden rounded to 16 (2816 for hidden 1024).
  HAP_RETURN_IF_ERROR(int_flag("intermediate", (o.hidden * 11 / 4 + 15) / 16 * 16, &o.intermediate));
  HAP_RETURN_IF_ERROR(int_flag("image-size", 56, &o.image_size));
  HAP_RETURN_IF_ERROR(int_flag("vision-layers", 2, &o.vision_layers));
  HAP_RETURN_IF_ERROR(int_flag("vision-hidden", 64, &o.vision_hidden));
  HAP_RETURN_IF_ERROR(int_flag("vision-heads", 4, &o.vision_heads));
  HAP_RETURN_IF_ERROR(int_flag("vocab", 512, &o.sp_vocab));
  HAP_RETURN_IF_ERROR(int_flag("model-vocab", 0, &o.model_vocab));
  HAP_RETURN_IF_ERROR(int_flag("shards", 1, &o.shards));
  const std::string dtype_name = flags.GetOr("dtype", "f32");
  HAP_ASSIGN_OR_RETURN(o.dtype, DTypeFlag(flags));
  o.corpus_path = flags.GetOr("corpus", TokenizerCorpusPath());
  // Progress on stderr for checkpoints that take a while to write (LLaVA-7B shapes: minutes).
  const auto t0 = std::chrono::steady_clock::now();
  o.progress = [&](const CheckpointProgress& p) {
    if (p.bytes_total < (uint64_t{256} << 20)) return;
    std::fprintf(stderr, "make-tiny: wrote %s (%d of %d files, %.2f of %.2f GB, %.0f s)\n",
                 p.file.c_str(), p.files_done, p.files, p.bytes_done / 1e9, p.bytes_total / 1e9,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  HAP_RETURN_IF_ERROR(WriteTinyModel(o, out));
  std::printf("wrote %s: %d decoder layers, hidden %d, %d/%d heads, %d visual tokens, %s%s\n",
              out.c_str(), o.layers, o.hidden, o.heads, o.kv_heads,
              (o.image_size / 14) * (o.image_size / 14), dtype_name.c_str(),
              o.shards > 1 ? absl::StrCat(", ", o.shards, " shards").c_str() : "");
  return absl::OkStatus();
}

int CmdMakeTiny(const std::vector<std::string>& args) {
  auto flags = Flags::Parse(args,
                            {"out", "seed", "layers", "hidden", "heads", "kv-heads", "intermediate",
                             "image-size", "vision-layers", "vision-hidden", "vision-heads",
                             "vocab", "model-vocab", "dtype", "shards", "family", "corpus"},
                            {});
  if (!flags.ok()) return Fail("make-tiny", flags.status());
  if (absl::Status s = MakeTiny(*flags); !s.ok()) return Fail("make-tiny", s);
  return 0;
}

}  // namespace

HAP_COMMAND(make-tiny, "Write a random-weight llava-hf checkpoint (tests, benchmarks)", CmdMakeTiny);

}  // namespace hap::cli
