// hapctl up: the whole pipeline on this machine — hap-encoder, hap-decode and hap-prefill as
// child processes on loopback with free ports. Prints the front door's host:port and "ready",
// then runs until SIGINT/SIGTERM and stops the three cleanly. The front door also serves the
// OpenAI-compatible HTTP API (on a free port unless --openai-port; off with --no-openai). With
// --auth-tokens-file the front door requires bearer tokens (services/README.md).
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/stop_signals.h"
#include "runtime/io/model_dir.h"
#include "sdk/local_pipeline.h"
#include "tools/hapctl/command.h"
#include "tools/hapctl/flags.h"
#include "tools/hapctl/run_options.h"

namespace hap::cli {
namespace {

constexpr char kUsage[] =
    "usage: hapctl up [--model DIR] [--method M] [--retain K|P% | --flops F] [--threads N]\n"
    "          [--device cpu|cuda] [--kv-dtype f32|bf16]\n"
    "                 [--max-concurrent N] [--queue-length N] [--decode-replicas N]\n"
    "                 [--openai-port P | --no-openai] [--bin-dir DIR] [--quiet]\n"
    "                 [--auth-tokens-file FILE [--auth-max-concurrent-per-client N]]";

int CmdUp(const std::vector<std::string>& args) {
  auto flags = Flags::Parse(
      args,
      {"model", "method", "retain", "flops", "threads", "device", "max-concurrent", "queue-length",
       "decode-replicas", "bin-dir", "host", "start-timeout-ms", "openai-port", "auth-tokens-file",
       "auth-max-concurrent-per-client", "kv-dtype"},
      {"quiet", "no-openai"});
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", kUsage);
    return Fail("up", flags.status());
  }
  if (flags->Has("retain") && flags->Has("flops")) {
    return Fail("up", absl::InvalidArgumentError("give one budget: --retain or --flops"));
  }
  auto timeout = flags->Int("start-timeout-ms", 120000);
  if (!timeout.ok()) return Fail("up", timeout.status());
  auto openai_port = flags->Int("openai-port", 0);
  if (!openai_port.ok()) return Fail("up", openai_port.status());
  if (*openai_port < 0 || *openai_port > 65535 || (flags->Bool("no-openai") && flags->Has("openai-port"))) {
    return Fail("up", absl::InvalidArgumentError(
                          "--openai-port must be in [0, 65535] (0 = a free port), and not given "
                          "with --no-openai"));
  }
  auto replicas = flags->Int("decode-replicas", 1);
  if (!replicas.ok()) return Fail("up", replicas.status());
  if (*replicas < 1 || *replicas > 64) {
    return Fail("up", absl::InvalidArgumentError(
                          absl::StrCat("--decode-replicas ", *replicas, " is not in [1, 64]")));
  }
  if (auto kv_dtype = ParseKvDTypeFlag(*flags); !kv_dtype.ok()) {
    return Fail("up", kv_dtype.status());
  }
  StopSignals::Install();

  sdk::LocalPipelineOptions o;
  o.bin_dir = flags->GetOr("bin-dir", "");
  o.model_dir = ResolveModelDir(flags->GetOr("model", ""));
  o.host = flags->GetOr("host", "127.0.0.1");
  o.echo_output = !flags->Bool("quiet");
  o.start_timeout = std::chrono::milliseconds(*timeout);
  o.decode_replicas = static_cast<int>(*replicas);
  o.openai_port = flags->Bool("no-openai") ? -1 : static_cast<int>(*openai_port);
  o.kv_dtype = flags->GetOr("kv-dtype", "");
  std::vector<std::string> common;
  for (const char* f : {"threads", "max-concurrent", "queue-length", "device"}) {
    if (auto v = flags->Get(f)) common.insert(common.end(), {absl::StrCat("--", f), *v});
  }
  o.encoder_args = o.decode_args = o.prefill_args = common;
  for (const char* f : {"method", "retain", "flops", "auth-max-concurrent-per-client"}) {
    if (auto v = flags->Get(f))
      o.prefill_args.insert(o.prefill_args.end(), {absl::StrCat("--", f), *v});
  }
  // hap-prefill reads (and re-reads) the file itself: only its path is passed on, made absolute
  // so that it does not depend on the children's working directory.
  if (auto file = flags->Get("auth-tokens-file")) {
    std::error_code ec;
    const std::string path = std::filesystem::absolute(*file, ec).string();
    o.prefill_args.insert(o.prefill_args.end(), {"--auth-tokens-file", ec ? *file : path});
  }

  auto pipeline = sdk::LocalPipeline::Start(o);
  if (!pipeline.ok()) return Fail("up", pipeline.status());
  std::printf("%s\n", (*pipeline)->front_door().c_str());
  std::printf(
      "hapctl up: ready (front door hap-prefill %s, hap-encoder %s, hap-decode %s; "
      "Ctrl-C stops)\n",
      (*pipeline)->front_door().c_str(), (*pipeline)->address(sdk::Service::kEncoder).c_str(),
      absl::StrJoin((*pipeline)->decode_addresses(), ",").c_str());
  if (o.openai_port >= 0) {
    std::printf("hapctl up: OpenAI API at http://%s/v1 (POST /v1/chat/completions)\n",
                (*pipeline)->openai_address().c_str());
  }
  if (auto file = flags->Get("auth-tokens-file")) {
    std::printf("hapctl up: bearer tokens required (tokens from %s; hapctl generate "
                "--token-file, api_key of OpenAI clients)\n",
                file->c_str());
  }
  std::fflush(stdout);

  int exit_code = 0;
  for (;;) {
    if (StopSignals::Wait(std::chrono::milliseconds(500))) break;
    bool all_up = true;
    for (sdk::Service s : {sdk::Service::kEncoder, sdk::Service::kPrefill, sdk::Service::kDecode}) {
      if (!(*pipeline)->process(s)->running()) {
        std::fprintf(stderr, "hapctl up: %s exited; stopping the others\n", sdk::ServiceBinary(s));
        all_up = false;
      }
    }
    if (!all_up) {
      exit_code = 1;
      break;
    }
  }
  std::fprintf(stderr, "hapctl up: stopping\n");
  absl::Status stopped = (*pipeline)->Stop();
  if (!stopped.ok()) {
    std::fprintf(stderr, "hapctl up: %s\n", std::string(stopped.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "hapctl up: stopped\n");
  return exit_code;
}

}  // namespace

HAP_COMMAND(up, "Run encoder, prefill and decode locally on free ports until Ctrl-C", CmdUp);

}  // namespace hap::cli
