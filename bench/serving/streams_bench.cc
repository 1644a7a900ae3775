// Concurrent streams through the three services on loopback: for each stream count N, N client
// threads each send --rounds Generate calls back to back; prints the aggregate generated
// tokens/s over the wall time of the whole run, the aggregate decode tokens/s (tokens after the
// first over the time from the first TTFT to the last token), TTFT and inter-token latency
// percentiles. Unpruned and with one pruning budget. Exits 1, naming the first error, when any
// request (the warm-up included) failed or a client could not connect.
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/timer.h"
#include "bench/common/bench_options.h"
#include "bench/common/percentile.h"
#include "bench/common/services_bench.h"
#include "runtime/io/config.h"
#include "runtime/io/model_dir.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "services/server/options.h"

namespace hap::bench {
namespace {

std::vector<svc::OptionSpec> Specs() {
  return {
      ModelSpec(),
      ImageSpec("image to send"),
      {"prompt", "HAP_BENCH_PROMPT", "What is in the picture?", "question"},
      {"streams", "HAP_BENCH_STREAMS", "1,4,16", "concurrent stream counts, comma-separated"},
      {"rounds", "HAP_BENCH_ROUNDS", "2", "requests each stream sends back to back"},
      {"method", "HAP_BENCH_METHOD", "hap", "pruning method of the pruned configuration"},
      {"retain", "HAP_BENCH_RETAIN", "11.1%", "its budget"},
      {"max-new-tokens", "HAP_BENCH_MAX_NEW_TOKENS", "32", "tokens per request"},
      ServiceThreadsSpec(),
      {"device", "HAP_DEVICE", "cpu", "the compute backend of the services it starts: cpu or cuda"},
      {"kv-dtype", "HAP_KV_DTYPE", "f32", "the KV caches of the services it starts: f32 or bf16"},
      {"prefill-gpu-memory", "HAP_BENCH_PREFILL_GPU_MEMORY", "",
       "--gpu-memory of the hap-prefill it starts (with --device cuda; empty = none)"},
      {"decode-gpu-memory", "HAP_BENCH_DECODE_GPU_MEMORY", "",
       "--gpu-memory of the hap-decode it starts (with --device cuda; empty = none)"},
      {"prefill-batch-tokens", "HAP_BENCH_PREFILL_BATCH_TOKENS", "",
       "--prefill-batch-tokens of the hap-prefill it starts (empty = its default, off)"},
      {"kv-handover", "HAP_BENCH_KV_HANDOVER", "",
       "--kv-handover of the hap-prefill it starts: auto or stream (empty = its default, auto)"},
      {"decode-graphs", "HAP_BENCH_DECODE_GRAPHS", "",
       "--decode-graphs of the hap-decode it starts: on or off (empty = its default, on)"},
      BinDirSpec(),
      {"address", "HAP_BENCH_ADDRESS", "",
       "front door of services already running (default: start the three services here)"},
  };
}

struct Round {
  double wall_s = 0;
  int64_t tokens = 0;
  double decode_span_s = 0;   // first token of any stream → last token of any stream
  int64_t decode_tokens = 0;  // tokens after each request's first
  std::vector<double> ttft_ms, itl_ms;
  int failures = 0;
  std::string first_error;
};

Round RunStreams(const std::string& address, const hap::v1::GenerateRequest& req, int streams,
                 int rounds) {
  Round r;
  std::mutex mu;
  std::vector<std::thread> threads;
  double first_token_s = 1e30, last_token_s = 0;
  const Clock::time_point t0 = Clock::now();
  for (int s = 0; s < streams; ++s) {
    threads.emplace_back([&] {
      auto client = sdk::Client::Connect(address);
      if (!client.ok()) {
        // Its requests were never sent: each counts as failed.
        std::lock_guard<std::mutex> lock(mu);
        if (r.failures == 0) r.first_error = client.status().ToString();
        r.failures += rounds;
        return;
      }
      for (int i = 0; i < rounds; ++i) {
        const double start_s = MsSince(t0) / 1e3;
        auto got = (*client)->Generate(req);
        std::lock_guard<std::mutex> lock(mu);
        if (!got.ok()) {
          if (r.failures++ == 0) r.first_error = got.status().ToString();
          continue;
        }
        const auto& times = got->token_times_ms;
        r.tokens += static_cast<int64_t>(times.size());
        if (times.empty()) continue;
        r.ttft_ms.push_back(got->ttft_ms);
        for (size_t k = 1; k < times.size(); ++k) r.itl_ms.push_back(times[k] - times[k - 1]);
        r.decode_tokens += static_cast<int64_t>(times.size()) - 1;
        first_token_s = std::min(first_token_s, start_s + times.front() / 1e3);
        last_token_s = std::max(last_token_s, start_s + times.back() / 1e3);
      }
    });
  }
  for (auto& t : threads) t.join();
  r.wall_s = MsSince(t0) / 1e3;
  r.decode_span_s = last_token_s > first_token_s ? last_token_s - first_token_s : 0;
  return r;
}

int Main(int argc, char** argv) {
  int exit_code = 0;
  std::optional<svc::Options> o =
      ParseBenchOptions(argc, argv, "streams_bench", Specs(), &exit_code);
  if (!o) return exit_code;
  const std::optional<std::vector<int>> counts =
      ParseIntList(*o, "streams", 1, 1024, "counts in [1, 1024]", "streams_bench");
  if (!counts) return 2;
  auto rounds = o->Int("rounds", 1, 100000);
  auto max_new = o->Int("max-new-tokens", 1, 1 << 20);
  if (!rounds.ok() || !max_new.ok()) {
    std::fprintf(stderr, "streams_bench: %s\n",
                 std::string((rounds.ok() ? max_new.status() : rounds.status()).message()).c_str());
    return 2;
  }
  const std::string model = ResolveModelDir(o->Get("model"));
  const std::optional<std::string> image = ReadImage(*o, "streams_bench");
  if (!image) return 2;
  const int most = *std::max_element(counts->begin(), counts->end());
  std::string address = o->Get("address");
  std::unique_ptr<sdk::LocalPipeline> pipeline;
  if (address.empty()) {
    // Every stream admitted at once: the services' limits must not be what is measured.
    sdk::LocalPipelineOptions po = QuietPipelineOptions(
        *o, model,
        {"--threads", o->Get("threads"), "--max-concurrent", absl::StrCat(most), "--queue-length",
         absl::StrCat(most), "--device", o->Get("device")});
    po.kv_dtype = o->Get("kv-dtype");
    for (const auto& [flag, service_flag, args] :
         {std::tuple{"prefill-gpu-memory", "--gpu-memory", &po.prefill_args},
          std::tuple{"decode-gpu-memory", "--gpu-memory", &po.decode_args},
          std::tuple{"prefill-batch-tokens", "--prefill-batch-tokens", &po.prefill_args},
          std::tuple{"kv-handover", "--kv-handover", &po.prefill_args},
          std::tuple{"decode-graphs", "--decode-graphs", &po.decode_args}}) {
      if (!o->Get(flag).empty()) {
        args->push_back(service_flag);
        args->push_back(o->Get(flag));
      }
    }
    auto started = sdk::LocalPipeline::Start(po);
    if (!started.ok()) {
      std::fprintf(stderr, "streams_bench: %s\n", started.status().ToString().c_str());
      return 1;
    }
    pipeline = std::move(*started);
    address = pipeline->front_door();
  }
  std::printf("model %s, %d tokens per request, %d request(s) per stream\n", model.c_str(),
              static_cast<int>(*max_new), static_cast<int>(*rounds));
  std::printf("  %-20s %7s %10s %10s %9s %9s %9s %9s %6s\n", "config", "streams", "agg tok/s",
              "dec tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "fails");
  FailedRequests failed;
  auto tally = [&](const Round& r) { failed.Add(r.failures, r.first_error); };
  for (const std::string& method : {std::string("none"), o->Get("method")}) {
    hap::v1::GenerateRequest req;
    req.set_image(*image);
    req.set_prompt(o->Get("prompt"));
    req.set_max_new_tokens(static_cast<int>(*max_new));
    req.mutable_pruning()->set_method(method);
    if (method != "none") req.mutable_pruning()->set_retain(o->Get("retain"));
    tally(RunStreams(address, req, 1, 1));  // warm-up
    const std::string name =
        method == "none" ? "none (unpruned)" : absl::StrCat(method, " ", o->Get("retain"));
    for (int n : *counts) {
      Round r = RunStreams(address, req, n, static_cast<int>(*rounds));
      tally(r);
      std::printf("  %-20s %7d %10.1f %10.1f %7.0fms %7.0fms %7.1fms %7.1fms %6d\n", name.c_str(),
                  n, r.tokens / r.wall_s,
                  r.decode_span_s > 0 ? r.decode_tokens / r.decode_span_s : 0, Median(r.ttft_ms),
                  Percentile(r.ttft_ms, 0.99), Median(r.itl_ms), Percentile(r.itl_ms, 0.99),
                  r.failures);
      if (r.failures > 0) std::printf("    first failure: %s\n", r.first_error.c_str());
      std::fflush(stdout);
    }
  }
  return failed.ExitCode("streams_bench");
}

}  // namespace
}  // namespace hap::bench

int main(int argc, char** argv) { return hap::bench::Main(argc, argv); }
