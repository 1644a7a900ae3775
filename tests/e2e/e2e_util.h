// Helpers for the end-to-end tests: a tiny checkpoint from `hapctl make-tiny`, `hapctl run --json`
// as the in-process reference, requests, the "nothing held" check, prefill's /metrics, and
// polling.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hap/v1/generate.pb.h"
#include "nlohmann/json.hpp"

namespace hap::sdk {
class Client;
class LocalPipeline;
}  // namespace hap::sdk

namespace hap::e2e {

// What one request asks, for both `hapctl run` and the services.
struct Ask {
  std::string prompt = "What is in the picture?";
  std::string method = "none";
  std::string retain;  // "" = no budget
  int max_new_tokens = 12;
  float temperature = 0;
  float top_p = 1;
  int top_k = 0;
  uint64_t seed = 0;
  std::string stop;        // "" = none
  std::string kv_dtype;    // hapctl run --kv-dtype; "" = its default (f32)
  std::string image_path;  // "" = TestImagePath()
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
};
CommandResult RunCommand(const std::vector<std::string>& argv,
                         std::chrono::milliseconds timeout = std::chrono::seconds(120));

std::string HapctlPath();
// `hapctl make-tiny --layers 8` (weights in `dtype`: f32, bf16 or f16) into the build tree;
// returns the directory.
std::string MakeTinyModel(const std::string& name, int seed, const std::string& dtype = "f32");
// `hapctl make-tiny --family qwen2.5-vl --layers N` into the build tree; returns the directory.
std::string MakeTinyQwenModel(const std::string& name, int seed, int layers);
// A real JPEG from the repository's test scenes.
std::string TestImagePath();
std::string ReadBytes(const std::string& path);

// `hapctl run --json` on `model_dir` (empty JSON object on failure, with the reason in `error`).
nlohmann::json HapctlRun(const std::string& model_dir, const Ask& ask, std::string* error);

// The token ids `hapctl run` answers `ask` with (empty, with the reason in `error`, on failure).
std::vector<int32_t> HapctlTokenIds(const std::string& model_dir, const Ask& ask,
                                    std::string* error);

// The greedy request the tests ask with every pruning method: `method` at retain 8 (no budget
// for "none"), seed 3.
Ask MethodAsk(const std::string& method);
// The sampled request they compare: HAP at retain 50%, temperature 0.8, top-p 0.9, top-k 40,
// seed 7, 24 new tokens.
Ask SampledHapAsk();

// A sampled request (hap, retain 8) that runs for at least `min_tokens` tokens on this model,
// found by trying seeds with `hapctl run`; its max_new_tokens is 3000.
std::optional<Ask> FindLongAsk(const std::string& model_dir, int min_tokens);

hap::v1::GenerateRequest ToRequest(const Ask& ask, const std::string& image);

// `ask` through the front door `client` answers as `hapctl run` on `model_dir` does: the same
// tokens (streamed and final), text, method, visual tokens per layer, KV bytes and FLOPs. The
// services' stats go to `stats` when given.
void ExpectSameAsRun(const std::string& model_dir, sdk::Client* client, const Ask& ask,
                     hap::v1::GenerateStats* stats = nullptr);

// True when the service holds nothing (sdk::HoldsNothing: no request in flight, no KV cache,
// lease or pool block); false when it does not answer GetState within `timeout`.
bool Idle(sdk::Client* client, std::chrono::milliseconds timeout = std::chrono::seconds(2));
// The same for the service at `address`, over a new connection, answering within a second.
bool Idle(const std::string& address);

// The port of prefill's /metrics on a pipeline whose prefill has --metrics-port 0, from the
// "hap-prefill metrics on HOST:PORT" line it printed at start-up.
absl::StatusOr<int> PrefillMetricsPort(sdk::LocalPipeline* pipeline);
// One sample of the /metrics at 127.0.0.1:`port`, e.g. hap_client_requests_total{client="bob"}:
// `absent` when the series has no sample, -1 when /metrics does not answer 200 or the value does
// not parse.
double ScrapeMetric(int port, const std::string& series, double absent);

// Polls `done` every 10 ms; the milliseconds it took, or nullopt at the timeout.
std::optional<double> WaitUntil(const std::function<bool()>& done,
                                std::chrono::milliseconds timeout);

template <class Repeated>
std::vector<int32_t> Ids(const Repeated& r) {
  return std::vector<int32_t>(r.begin(), r.end());
}

}  // namespace hap::e2e
