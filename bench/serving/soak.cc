// Soak: N concurrent streams through the three services for a fixed time, each sending requests
// back to back with a mix of pruning methods and budgets, sampled and greedy decoding, cancels
// mid-stream and short deadlines. Prints requests served, outcomes, unexpected errors, TTFT and
// inter-token latency percentiles, the RSS of each service sampled every --sample-s seconds with
// its slope after warm-up, and what the services still hold at the end (KV caches, leases, pool
// blocks, requests in flight). Exits 1 when an unexpected error happened or something is still
// held, so a short run can be a test.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/timer.h"
#include "bench/common/bench_options.h"
#include "bench/common/percentile.h"
#include "bench/common/services_bench.h"
#include "runtime/io/model_dir.h"
#include "sdk/client.h"
#include "sdk/held_state.h"
#include "sdk/local_pipeline.h"
#include "services/server/options.h"

namespace hap::bench {
namespace {

std::vector<svc::OptionSpec> Specs() {
  return {
      ModelSpec(),
      ImageSpec("image to send"),
      {"streams", "HAP_SOAK_STREAMS", "64", "concurrent streams"},
      {"duration-s", "HAP_SOAK_DURATION_S", "300", "how long the streams send requests"},
      {"sample-s", "HAP_SOAK_SAMPLE_S", "5", "RSS sampling period"},
      {"methods", "HAP_SOAK_METHODS", "none,hap,uniform,fastv,pdrop,sparsevlm,visionzip,random",
       "pruning methods to mix"},
      {"budgets", "HAP_SOAK_BUDGETS", "33.3%,22.2%,11.1%", "retain budgets to mix"},
      {"max-new-tokens", "HAP_SOAK_MAX_NEW_TOKENS", "24", "most tokens per request"},
      ServiceThreadsSpec(),
      BinDirSpec(),
  };
}

// What one request was set up to do, and so which endings are expected.
enum class Kind { kPlain, kCancel, kDeadline };

struct Totals {
  std::mutex mu;
  std::map<std::string, int64_t> outcomes;  // "OK", "CANCELLED (asked)", ...
  std::vector<std::string> unexpected;      // the first few unexpected errors
  int64_t unexpected_count = 0;
  int64_t served = 0, tokens = 0;
  std::vector<double> ttft_ms, itl_ms;
};

int64_t RssKiB(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      int64_t kib = 0;
      for (absl::string_view part : absl::StrSplit(line.substr(6), ' ', absl::SkipEmpty())) {
        if (absl::SimpleAtoi(part, &kib)) return kib;
      }
    }
  }
  return 0;
}

// Least-squares slope of y over x, as % of y's mean per minute (x in seconds).
double SlopePercentPerMinute(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = x.size();
  if (n < 3) return 0;
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) mx += x[i], my += y[i];
  mx /= n;
  my /= n;
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < n; ++i) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx);
  if (sxx == 0 || my == 0) return 0;
  return sxy / sxx * 60 / my * 100;
}

void Stream(const std::string& address, const std::string& image, int index,
            const std::vector<std::string>& methods, const std::vector<std::string>& budgets,
            int max_new_tokens, Clock::time_point end, Totals* totals) {
  std::mt19937 rng(1000 + index);
  auto client = sdk::Client::Connect(address);
  if (!client.ok()) {
    std::lock_guard<std::mutex> lock(totals->mu);
    ++totals->unexpected_count;
    totals->unexpected.push_back(std::string(client.status().message()));
    return;
  }
  while (Clock::now() < end) {
    hap::v1::GenerateRequest req;
    req.set_image(image);
    req.set_prompt(rng() % 2 ? "What is in the picture?" : "How many shapes are there?");
    req.set_max_new_tokens(1 + static_cast<int>(rng() % max_new_tokens));
    const std::string& method = methods[rng() % methods.size()];
    req.mutable_pruning()->set_method(method);
    if (method != "none") req.mutable_pruning()->set_retain(budgets[rng() % budgets.size()]);
    if (rng() % 3 == 0) {
      req.mutable_sampling()->set_temperature(0.7f);
      req.mutable_sampling()->set_seed(rng());
    }
    const int pick = static_cast<int>(rng() % 10);
    const Kind kind = pick == 0 ? Kind::kCancel : pick == 1 ? Kind::kDeadline : Kind::kPlain;
    sdk::StreamOptions so;
    int seen = 0;
    const int cancel_after = 1 + static_cast<int>(rng() % 3);
    if (kind == Kind::kCancel) {
      so.on_delta = [&](const hap::v1::TextDelta& d) {
        seen += d.token_ids_size();
        return seen < cancel_after;
      };
    } else if (kind == Kind::kDeadline) {
      so.timeout = std::chrono::milliseconds(20 + rng() % 200);
    } else {
      so.timeout = std::chrono::minutes(2);  // a stuck request shows up as an error
    }
    absl::StatusOr<sdk::GenerateResult> r = (*client)->Generate(req, so);
    std::lock_guard<std::mutex> lock(totals->mu);
    std::string outcome;
    bool expected = true;
    if (r.ok()) {
      outcome = "OK";
      ++totals->served;
      totals->tokens += r->stats.token_ids_size();
      totals->ttft_ms.push_back(r->ttft_ms);
      for (size_t i = 1; i < r->token_times_ms.size(); ++i) {
        totals->itl_ms.push_back(r->token_times_ms[i] - r->token_times_ms[i - 1]);
      }
    } else if (r.status().code() == absl::StatusCode::kCancelled && kind == Kind::kCancel) {
      outcome = "CANCELLED (asked)";
    } else if (r.status().code() == absl::StatusCode::kDeadlineExceeded &&
               kind == Kind::kDeadline) {
      outcome = "DEADLINE_EXCEEDED (short deadline)";
    } else {
      outcome = absl::StatusCodeToString(r.status().code());
      expected = false;
    }
    ++totals->outcomes[outcome];
    if (!expected) {
      ++totals->unexpected_count;
      if (totals->unexpected.size() < 5) {
        totals->unexpected.push_back(absl::StrCat(method, ": ", r.status().ToString()));
      }
    }
  }
}

int Main(int argc, char** argv) {
  int exit_code = 0;
  std::optional<svc::Options> o = ParseBenchOptions(argc, argv, "soak", Specs(), &exit_code);
  if (!o) return exit_code;
  auto streams = o->Int("streams", 1, 1024);
  auto duration = o->Int("duration-s", 1, 24 * 3600);
  auto sample = o->Int("sample-s", 1, 3600);
  auto max_new = o->Int("max-new-tokens", 1, 4096);
  for (const absl::Status& s :
       {streams.status(), duration.status(), sample.status(), max_new.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "soak: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  const std::vector<std::string> methods = absl::StrSplit(o->Get("methods"), ',');
  const std::vector<std::string> budgets = absl::StrSplit(o->Get("budgets"), ',');
  const std::optional<std::string> image = ReadImage(*o, "soak");
  if (!image) return 2;
  // Every stream admitted: the soak measures leaks and latency, not refusals.
  const sdk::LocalPipelineOptions po =
      QuietPipelineOptions(*o, ResolveModelDir(o->Get("model")),
                           {"--threads", o->Get("threads"), "--max-concurrent",
                            absl::StrCat(*streams), "--queue-length", absl::StrCat(*streams)});
  auto pipeline = sdk::LocalPipeline::Start(po);
  if (!pipeline.ok()) {
    std::fprintf(stderr, "soak: %s\n", pipeline.status().ToString().c_str());
    return 1;
  }
  const std::string address = (*pipeline)->front_door();
  const sdk::Service services[] = {sdk::Service::kEncoder, sdk::Service::kPrefill,
                                   sdk::Service::kDecode};
  std::printf("soak: model %s, %d streams for %d s, methods %s, budgets %s\n", po.model_dir.c_str(),
              static_cast<int>(*streams), static_cast<int>(*duration), o->Get("methods").c_str(),
              o->Get("budgets").c_str());

  Totals totals;
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point end = t0 + std::chrono::seconds(*duration);
  std::vector<std::thread> threads;
  for (int i = 0; i < *streams; ++i) {
    threads.emplace_back(Stream, address, *image, i, methods, budgets, static_cast<int>(*max_new),
                         end, &totals);
  }
  // RSS of each service every --sample-s seconds while the streams run.
  std::vector<double> times;
  std::vector<std::vector<double>> rss(3);
  for (Clock::time_point next = t0; next <= end; next += std::chrono::seconds(*sample)) {
    std::this_thread::sleep_until(next);
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    for (int s = 0; s < 3; ++s) {
      rss[s].push_back(RssKiB((*pipeline)->process(services[s])->pid()) / 1024.0);
    }
  }
  for (std::thread& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();

  // What the services still hold once every call ended (given a moment to settle).
  bool clean = false;
  std::string held;
  for (int attempt = 0; attempt < 50 && !clean; ++attempt) {
    clean = true;
    held.clear();
    for (sdk::Service s : services) {
      auto c = sdk::Client::Connect((*pipeline)->address(s));
      auto st = c.ok() ? (*c)->GetState() : absl::StatusOr<hap::v1::ServerState>(c.status());
      if (!st.ok()) {
        clean = false;
        absl::StrAppend(&held, sdk::ServiceBinary(s), ": ", st.status().ToString(), "; ");
        continue;
      }
      absl::StrAppend(&held, sdk::ServiceBinary(s), ": ", sdk::HeldSummary(*st), "; ");
      clean = clean && sdk::HoldsNothing(*st);
    }
    if (!clean) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  int64_t requests = 0;
  for (const auto& [name, n] : totals.outcomes) requests += n;
  std::printf("requests %lld in %.0f s (%.1f/s): served %lld, %lld tokens (%.1f tok/s)\n",
              static_cast<long long>(requests), wall, requests / wall,
              static_cast<long long>(totals.served), static_cast<long long>(totals.tokens),
              totals.tokens / wall);
  for (const auto& [name, n] : totals.outcomes) {
    std::printf("  %-36s %lld\n", name.c_str(), static_cast<long long>(n));
  }
  std::printf("unexpected errors: %lld\n", static_cast<long long>(totals.unexpected_count));
  for (const std::string& e : totals.unexpected) std::printf("  %s\n", e.c_str());
  std::printf("TTFT ms p50 %.1f p99 %.1f | inter-token ms p50 %.1f p99 %.1f\n",
              Median(totals.ttft_ms), Percentile(totals.ttft_ms, 0.99), Median(totals.itl_ms),
              Percentile(totals.itl_ms, 0.99));
  // Warm-up: the first fifth of the run (pools and caches filling) is left out of the slope.
  const size_t warm = times.size() / 5;
  std::printf(
      "RSS MiB every %d s (slope after the first %zu samples, %% of the mean per minute):\n",
      static_cast<int>(*sample), warm);
  for (int s = 0; s < 3; ++s) {
    std::string series;
    for (double v : rss[s]) absl::StrAppend(&series, " ", static_cast<int>(v + 0.5));
    const std::vector<double> x(times.begin() + warm, times.end());
    const std::vector<double> y(rss[s].begin() + warm, rss[s].end());
    std::printf("  %-12s slope %+.2f%%/min:%s\n", sdk::ServiceBinary(services[s]),
                SlopePercentPerMinute(x, y), series.c_str());
  }
  std::printf("held at the end: %s%s\n", held.c_str(), clean ? "(nothing)" : "(NOT released)");
  const bool ok = totals.unexpected_count == 0 && clean && totals.served > 0;
  std::printf("soak: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace hap::bench

int main(int argc, char** argv) { return hap::bench::Main(argc, argv); }
