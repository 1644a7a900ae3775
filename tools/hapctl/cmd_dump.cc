// hapctl dump: writes the intermediate tensors of one request as .npy files, so the runtime can
// be compared stage by stage with the PyTorch reference (tools/pytorch/llava_model.py).
#include <cstdio>
#include <filesystem>

#include "base/npy.h"
#include "base/status_macros.h"
#include "runtime/model/generate.h"
#include "runtime/model/llava_model.h"
#include "tools/hapctl/command.h"
#include "tools/hapctl/flags.h"
#include "runtime/io/model_dir.h"
#include "tools/hapctl/run_options.h"

namespace hap::cli {
namespace {

absl::Status Dump(const Flags& flags) {
  HAP_ASSIGN_OR_RETURN(std::string image_path, flags.Required("image"));
  HAP_ASSIGN_OR_RETURN(std::string prompt, flags.Required("prompt"));
  HAP_ASSIGN_OR_RETURN(std::string out, flags.Required("out"));
  HAP_ASSIGN_OR_RETURN(int64_t max_new, flags.Int("max-new-tokens", 32));
  ModelOptions options;
  HAP_ASSIGN_OR_RETURN(options.kv_dtype, ParseKvDTypeFlag(flags));
  HAP_ASSIGN_OR_RETURN(std::string bytes, ReadFile(image_path));
  HAP_ASSIGN_OR_RETURN(auto model,
                       LlavaModel::Load(ResolveModelDir(flags.GetOr("model", "")), options));
  HAP_RETURN_IF_ERROR(CreateDirectories(out));
  auto path = [&](const char* name) { return (std::filesystem::path(out) / name).string(); };
  const LlavaConfig& cfg = model->config();
  const int64_t s = cfg.vision.image_size;

  HAP_ASSIGN_OR_RETURN(std::vector<float> pixels, model->PreprocessImage(bytes));
  HAP_RETURN_IF_ERROR(WriteNpy(path("pixels.npy"), pixels.data(), {3, s, s}));
  HAP_ASSIGN_OR_RETURN(std::vector<float> features, model->VisionFeatures(pixels, nullptr));
  const int n_vis = static_cast<int>(features.size() / cfg.vision.hidden_size);
  HAP_RETURN_IF_ERROR(
      WriteNpy(path("vision_features.npy"), features.data(), {n_vis, cfg.vision.hidden_size}));
  HAP_ASSIGN_OR_RETURN(std::vector<float> embeds, model->Project(features, n_vis));
  HAP_RETURN_IF_ERROR(
      WriteNpy(path("image_embeds.npy"), embeds.data(), {n_vis, cfg.text.hidden_size}));
  HAP_ASSIGN_OR_RETURN(PromptTokens prompt_tokens, model->Tokenize(prompt, n_vis));
  HAP_RETURN_IF_ERROR(WriteNpy(path("input_ids.npy"), prompt_tokens.ids.data(),
                               {static_cast<int64_t>(prompt_tokens.ids.size())}));
  HAP_ASSIGN_OR_RETURN(PrefillOutput prefill, model->Prefill(prompt_tokens, embeds, nullptr));
  HAP_RETURN_IF_ERROR(WriteNpy(path("prefill_logits.npy"), prefill.logits.data(),
                               {static_cast<int64_t>(prefill.logits.size())}));
  StopCriteria stop;
  stop.max_new_tokens = static_cast<int>(max_new);
  HAP_ASSIGN_OR_RETURN(DecodeResult decoded,
                       RunDecodeLoop(*model, &prefill.kv(), prefill.logits, SamplingParams{},
                                     stop, nullptr));
  HAP_RETURN_IF_ERROR(WriteNpy(path("tokens.npy"), decoded.tokens.data(),
                               {static_cast<int64_t>(decoded.tokens.size())}));
  std::printf("wrote pixels, vision_features, image_embeds, input_ids, prefill_logits, tokens "
              "(.npy) to %s\n", out.c_str());
  return absl::OkStatus();
}

constexpr char kUsage[] =
    "usage: hapctl dump [--model DIR] --image FILE --prompt TEXT --out DIR\n"
    "         [--max-new-tokens N (32)] [--kv-dtype f32|bf16]\n"
    "\n"
    "Writes pixels, vision_features, image_embeds, input_ids, prefill_logits and the greedy\n"
    "tokens of one unpruned request as .npy files in DIR, for parity checks against the PyTorch\n"
    "reference. --kv-dtype: what the KV cache holds (default f32; bf16 as hapctl run's).\n";

int CmdDump(const std::vector<std::string>& args) {
  auto flags = Flags::Parse(args, {"model", "image", "prompt", "out", "max-new-tokens", "kv-dtype"},
                            {"help"});
  if (!flags.ok()) return Fail("dump", flags.status());
  if (flags->Bool("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (absl::Status s = Dump(*flags); !s.ok()) return Fail("dump", s);
  return 0;
}

}  // namespace

HAP_COMMAND(dump, "Write one request's intermediate tensors as .npy (for parity checks)", CmdDump);

}  // namespace hap::cli
