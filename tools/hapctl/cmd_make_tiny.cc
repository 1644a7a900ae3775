// hapctl make-tiny: writes a random-weight checkpoint in the exact llava-hf layout (config.json,
// safetensors — sharded with an index when asked —, a SentencePiece tokenizer.model trained on
// the project's corpus, and preprocessor_config.json, processor_config.json, chat_template.json,
// tokenizer_config.json, special_tokens_map.json, generation_config.json), for tests and
// benchmarks.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/io/model_dir.h"
#include "runtime/tiny/tiny_model.h"
#include "tools/hapctl/command.h"
#include "tools/hapctl/flags.h"

namespace hap::cli {
namespace {

absl::Status MakeTiny(const Flags& flags) {
  HAP_ASSIGN_OR_RETURN(std::string out, flags.Required("out"));
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
  if (dtype_name == "f32") {
    o.dtype = DType::kF32;
  } else if (dtype_name == "bf16") {
    o.dtype = DType::kBF16;
  } else if (dtype_name == "f16") {
    o.dtype = DType::kF16;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype must be f32, bf16 or f16, got '", dtype_name, "'"));
  }
  o.corpus_path = TokenizerCorpusPath();
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
                             "vocab", "model-vocab", "dtype", "shards"},
                            {});
  if (!flags.ok()) return Fail("make-tiny", flags.status());
  if (absl::Status s = MakeTiny(*flags); !s.ok()) return Fail("make-tiny", s);
  return 0;
}

}  // namespace

HAP_COMMAND(make-tiny, "Write a random-weight llava-hf checkpoint (tests, benchmarks)", CmdMakeTiny);

}  // namespace hap::cli
