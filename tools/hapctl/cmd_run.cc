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
#include "runtime/model/vision_language_model.h"
#include "tools/hapctl/command.h"
#include "tools/hapctl/flags.h"
#include "tools/hapctl/run_options.h"

namespace hap::cli {
namespace {

int CmdRun(const std::vector<std::string>& args) {
  std::set<std::string> value_flags = {"model",  "image",    "prompt",          "threads",
                                       "device", "kv-dtype", "attention-dtype", "decode-graphs"};
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
  auto decode_graphs = ParseDecodeGraphsFlag(*flags);
  if (!decode_graphs.ok()) return Fail("run", decode_graphs.status());

  const auto t0 = std::chrono::steady_clock::now();
  ModelOptions options;
  options.threads = static_cast<int>(*threads);
  options.kv_dtype = *kv_dtype;
  options.attention_dtype = *attention_dtype;
  options.decode_graphs = *decode_graphs;
  auto backend = BackendForDevice(DeviceFlag(*flags));
  if (!backend.ok()) return Fail("run", backend.status());
  options.backend = *backend;
  const std::string dir = ResolveModelDir(flags->GetOr("model", ""));
  TokenSink sink;
  if (!json) {
    sink = [](int32_t, const std::string& delta) {
      std::fwrite(delta.data(), 1, delta.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  auto model = VisionLanguageModel::Load(dir, options);
  if (!model.ok()) return Fail("run", model.status());
  const double load_ms = MsSince(t0);
  // A budget in % is of the image's visual tokens (for Qwen2.5-VL they follow its size).
  auto request = ParseGenerateRequest(
      *flags, [&](std::string_view image) { return (*model)->VisualTokensOf(image); });
  if (!request.ok()) return Fail("run", request.status());
  absl::StatusOr<GenerateResult> result = (*model)->Generate(*request, sink);
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
