// Prefill in slices through the three services: long unpruned prompts and short pruned ones sent
// at the same time, once per --prefill-chunk-tokens value (a fresh pipeline each). Prints each
// class's TTFT percentiles and completed requests, and the aggregate tokens/s: what slicing buys
// the short requests and what it costs the long ones. Exits 1, naming the first error, when any
// request (a warm-up included) failed or a client could not connect.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/timer.h"
#include "bench/common/bench_options.h"
#include "bench/common/percentile.h"
#include "bench/common/services_bench.h"
#include "runtime/io/model_dir.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "services/server/options.h"

namespace hap::bench {
namespace {

constexpr char kLongPrompt[] =
    "Describe every object in this picture in detail: its colour, its size, its shape, where it "
    "is in the frame, what it is next to and what it might be used for. Then describe the "
    "background, the light, and what the whole scene is, and say which object stands out most "
    "and why.";

std::vector<svc::OptionSpec> Specs() {
  return {
      ModelSpec(),
      ImageSpec("image to send"),
      {"chunks", "HAP_BENCH_CHUNKS", "0,256,64",
       "--prefill-chunk-tokens values to compare, comma-separated (0 = whole prefills)"},
      {"long-streams", "HAP_BENCH_LONG_STREAMS", "1", "streams sending long unpruned prompts"},
      {"short-streams", "HAP_BENCH_SHORT_STREAMS", "2", "streams sending short pruned prompts"},
      {"short-retain", "HAP_BENCH_SHORT_RETAIN", "5.6%", "HAP budget of the short requests"},
      {"seconds", "HAP_BENCH_SECONDS", "30", "how long each configuration runs"},
      {"max-new-tokens", "HAP_BENCH_MAX_NEW_TOKENS", "8", "tokens per request"},
      ServiceThreadsSpec(),
      BinDirSpec(),
  };
}

struct ClassResult {
  std::vector<double> ttft_ms;
  int64_t tokens = 0;
  int failures = 0;
  std::string first_error;
};

// `streams` threads send `req` back to back until `stop`; a request started before it finishes.
void Drive(const std::string& address, const hap::v1::GenerateRequest& req, int streams,
           const std::atomic<bool>& stop, ClassResult* out, std::mutex* mu,
           std::vector<std::thread>* threads) {
  for (int s = 0; s < streams; ++s) {
    threads->emplace_back([&address, &req, &stop, out, mu] {
      auto client = sdk::Client::Connect(address);
      if (!client.ok()) {
        std::lock_guard<std::mutex> lock(*mu);
        if (out->failures++ == 0) out->first_error = client.status().ToString();
        return;
      }
      while (!stop.load()) {
        auto got = (*client)->Generate(req);
        std::lock_guard<std::mutex> lock(*mu);
        if (!got.ok()) {
          if (out->failures++ == 0) out->first_error = got.status().ToString();
          continue;
        }
        out->ttft_ms.push_back(got->ttft_ms);
        out->tokens += static_cast<int64_t>(got->token_times_ms.size());
      }
    });
  }
}

void PrintClass(const char* name, const ClassResult& r, double wall_s) {
  std::printf("    %-6s %6zu req %8.0fms %8.0fms %8.0fms %9.1f %6d\n", name, r.ttft_ms.size(),
              Median(r.ttft_ms), Percentile(r.ttft_ms, 0.99),
              r.ttft_ms.empty() ? 0.0 : *std::max_element(r.ttft_ms.begin(), r.ttft_ms.end()),
              r.tokens / wall_s, r.failures);
  if (r.failures > 0) std::printf("      first failure: %s\n", r.first_error.c_str());
}

int Main(int argc, char** argv) {
  int exit_code = 0;
  std::optional<svc::Options> o =
      ParseBenchOptions(argc, argv, "prefill_slices_bench", Specs(), &exit_code);
  if (!o) return exit_code;
  const std::optional<std::vector<int>> chunks = ParseIntList(
      *o, "chunks", 0, std::numeric_limits<int>::max(), "counts >= 0", "prefill_slices_bench");
  if (!chunks) return 2;
  auto long_streams = o->Int("long-streams", 0, 256);
  auto short_streams = o->Int("short-streams", 0, 256);
  auto seconds = o->Int("seconds", 1, 3600);
  auto max_new = o->Int("max-new-tokens", 1, 1 << 20);
  for (const auto* v : {&long_streams, &short_streams, &seconds, &max_new}) {
    if (!v->ok()) {
      std::fprintf(stderr, "prefill_slices_bench: %s\n",
                   std::string(v->status().message()).c_str());
      return 2;
    }
  }
  const std::string model = ResolveModelDir(o->Get("model"));
  const std::optional<std::string> image = ReadImage(*o, "prefill_slices_bench");
  if (!image) return 2;
  hap::v1::GenerateRequest long_req, short_req;
  for (auto* r : {&long_req, &short_req}) {
    r->set_image(*image);
    r->set_max_new_tokens(static_cast<int>(*max_new));
  }
  long_req.set_prompt(kLongPrompt);
  long_req.mutable_pruning()->set_method("none");
  short_req.set_prompt("What is it?");
  short_req.mutable_pruning()->set_method("hap");
  short_req.mutable_pruning()->set_retain(o->Get("short-retain"));

  FailedRequests failed;
  std::printf(
      "model %s; %d long (unpruned) + %d short (hap %s) streams, %d tokens each, %d s "
      "per configuration\n",
      model.c_str(), static_cast<int>(*long_streams), static_cast<int>(*short_streams),
      o->Get("short-retain").c_str(), static_cast<int>(*max_new), static_cast<int>(*seconds));
  for (int chunk : *chunks) {
    sdk::LocalPipelineOptions po = QuietPipelineOptions(
        *o, model,
        {"--threads", o->Get("threads"), "--max-concurrent", "64", "--queue-length", "64"});
    po.prefill_args.insert(po.prefill_args.end(), {"--prefill-chunk-tokens", absl::StrCat(chunk)});
    auto pipeline = sdk::LocalPipeline::Start(po);
    if (!pipeline.ok()) {
      std::fprintf(stderr, "prefill_slices_bench: %s\n", pipeline.status().ToString().c_str());
      return 1;
    }
    const std::string address = (*pipeline)->front_door();
    {  // warm-up: one of each
      auto client = sdk::Client::Connect(address);
      failed.Add(client.status());
      if (client.ok()) {
        failed.Add((*client)->Generate(long_req).status());
        failed.Add((*client)->Generate(short_req).status());
      }
    }
    ClassResult long_r, short_r;
    std::mutex mu;
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    const Clock::time_point t0 = Clock::now();
    Drive(address, long_req, static_cast<int>(*long_streams), stop, &long_r, &mu, &threads);
    Drive(address, short_req, static_cast<int>(*short_streams), stop, &short_r, &mu, &threads);
    std::this_thread::sleep_for(std::chrono::seconds(*seconds));
    stop = true;
    for (std::thread& t : threads) t.join();
    const double wall_s = MsSince(t0) / 1e3;
    std::printf("  --prefill-chunk-tokens %d (%.1f s)\n", chunk, wall_s);
    std::printf("    %-6s %10s %10s %10s %10s %9s %6s\n", "class", "requests", "TTFT p50",
                "TTFT p99", "TTFT max", "tok/s", "fails");
    PrintClass("long", long_r, wall_s);
    PrintClass("short", short_r, wall_s);
    std::fflush(stdout);
    for (const ClassResult* r : {&long_r, &short_r}) failed.Add(r->failures, r->first_error);
  }
  return failed.ExitCode("prefill_slices_bench");
}

}  // namespace
}  // namespace hap::bench

int main(int argc, char** argv) { return hap::bench::Main(argc, argv); }
