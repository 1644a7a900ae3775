// hapctl run: answer a question about an image in process, streaming the answer (a LLaVA or a
// Qwen2.5-VL directory).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/status_macros.h"
#include "base/timer.h"
#include "nlohmann/json.hpp"
#include "runtime/device/device_backend.h"
#include "runtime/io/model_dir.h"
#include "runtime/io/qwen_config.h"
#include "runtime/model/pipeline.h"
#include "tools/hapctl/command.h"
#include "tools/hapctl/flags.h"
#include "tools/hapctl/run_options.h"

namespace hap::cli {
namespace {

int CmdRun(const std::vector<std::string>& args) {
  std::set<std::string> value_flags = {"model",  "image",    "prompt",         "threads",
                                       "device", "kv-dtype", "attention-dtype"};
  std::set<std::string> bool_flags = {"json"};
  AddGenerationFlags(&value_flags);
  auto flags = Flags::Parse(args, value_flags, bool_flags);
  if (!flags.ok()) return Fail("run", flags.status());
  const bool json = flags->Bool("json");

  auto threads = flags->Int("threads", 0);
  if (!threads.ok()) return Fail("run", threads.status());
  auto kv_dtype = ParseKvDTypeFlag(*flags);
  if (!kv_dtype.ok()) return Fail("run", kv_dtype.status());
  auto attention_dtype = ParseAttentionDTypeFlag(*flags);
  if (!attention_dtype.ok()) return Fail("run", attention_dtype.status());

  const auto t0 = std::chrono::steady_clock::now();
  ModelOptions options;
  options.threads = static_cast<int>(*threads);
  options.kv_dtype = *kv_dtype;
  options.attention_dtype = *attention_dtype;
  auto backend = BackendForDevice(DeviceFlag(*flags));
  if (!backend.ok()) return Fail("run", backend.status());
  options.backend = *backend;
  const std::string dir = ResolveModelDir(flags->GetOr("model", ""));
  absl::StatusOr<GenerateResult> result;
  TokenSink sink;
  if (!json) {
    sink = [](int32_t, const std::string& delta) {
      std::fwrite(delta.data(), 1, delta.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  double load_ms = 0;
  if (IsQwen25VLDirectory(dir)) {
    // Qwen2.5-VL: the image's own resolution decides its visual tokens, which a budget in %
    // is taken of.
    auto model = QwenModel::Load(dir, options);
    if (!model.ok()) return Fail("run", model.status());
    load_ms = MsSince(t0);
    auto image_path = flags->Required("image");
    if (!image_path.ok()) return Fail("run", image_path.status());
    auto image = ReadFile(*image_path);
    if (!image.ok()) return Fail("run", image.status());
    auto visual_tokens = VisualTokensOf(**model, *image);
    if (!visual_tokens.ok()) return Fail("run", visual_tokens.status());
    auto request = ParseGenerateRequest(*flags, *visual_tokens);
    if (!request.ok()) return Fail("run", request.status());
    result = Generate(**model, *request, sink);
  } else {
    auto model = LlavaModel::Load(dir, options);
    if (!model.ok()) return Fail("run", model.status());
    load_ms = MsSince(t0);
    auto request = ParseGenerateRequest(*flags, (*model)->config().num_visual_tokens());
    if (!request.ok()) return Fail("run", request.status());
    result = Generate(**model, *request, sink);
  }
  if (!result.ok()) {
    if (!json) std::fputc('\n', stdout);
    return Fail("run", result.status());
  }
  if (json) {
    std::printf("%s\n", GenerateResultJson(*result, load_ms).dump().c_str());
  } else {
    std::printf("\n");
    PrintTimings(*result, load_ms);
  }
  return 0;
}

}  // namespace

HAP_COMMAND(run, "Answer a question about an image in process (streams the answer)", CmdRun);

}  // namespace hap::cli
