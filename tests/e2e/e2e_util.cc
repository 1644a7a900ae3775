#include "tests/e2e/e2e_util.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "sdk/child_process.h"
#include "sdk/client.h"
#include "sdk/held_state.h"
#include "sdk/local_pipeline.h"
#include "telemetry/http_client.h"

namespace hap::e2e {

CommandResult RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  CommandResult r;
  auto child = sdk::ChildProcess::Spawn(argv, "");
  if (!child.ok()) return r;
  auto lines = (*child)->ReadAll(timeout);
  r.exit_code = (*child)->Wait(std::chrono::seconds(10)).value_or(-1);
  if (lines.ok()) r.out = absl::StrJoin(*lines, "\n");
  return r;
}

std::string HapctlPath() { return HAP_HAPCTL; }

std::string MakeTinyModel(const std::string& name, int seed, const std::string& dtype) {
  const std::string dir = absl::StrCat(HAP_BINARY_DIR, "/tests/e2e/", name);
  std::filesystem::remove_all(dir);
  const CommandResult r = RunCommand({HapctlPath(), "make-tiny", "--out", dir, "--layers", "8",
                                      "--seed", std::to_string(seed), "--dtype", dtype});
  return r.exit_code == 0 ? dir : "";
}

std::string MakeTinyQwenModel(const std::string& name, int seed, int layers) {
  const std::string dir = absl::StrCat(HAP_BINARY_DIR, "/tests/e2e/", name);
  std::filesystem::remove_all(dir);
  const CommandResult r =
      RunCommand({HapctlPath(), "make-tiny", "--family", "qwen2.5-vl", "--out", dir, "--layers",
                  std::to_string(layers), "--seed", std::to_string(seed)});
  return r.exit_code == 0 ? dir : "";
}

std::string TestImagePath() {
  return std::string(HAP_SOURCE_DIR) + "/data/scenes-test/images/test_0000.jpg";
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

nlohmann::json HapctlRun(const std::string& model_dir, const Ask& ask, std::string* error) {
  std::vector<std::string> argv = {HapctlPath(),
                                   "run",
                                   "--json",
                                   "--model",
                                   model_dir,
                                   "--image",
                                   ask.image_path.empty() ? TestImagePath() : ask.image_path,
                                   "--prompt",
                                   ask.prompt,
                                   "--method",
                                   ask.method,
                                   "--max-new-tokens",
                                   std::to_string(ask.max_new_tokens),
                                   "--temperature",
                                   absl::StrCat(ask.temperature),
                                   "--top-p",
                                   absl::StrCat(ask.top_p),
                                   "--top-k",
                                   std::to_string(ask.top_k),
                                   "--seed",
                                   std::to_string(ask.seed)};
  if (!ask.retain.empty()) argv.insert(argv.end(), {"--retain", ask.retain});
  if (!ask.stop.empty()) argv.insert(argv.end(), {"--stop", ask.stop});
  if (!ask.kv_dtype.empty()) argv.insert(argv.end(), {"--kv-dtype", ask.kv_dtype});
  const CommandResult r = RunCommand(argv);
  if (r.exit_code != 0) {
    *error = absl::StrCat("hapctl run exited with ", r.exit_code, ": ", r.out);
    return nlohmann::json::object();
  }
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    *error = absl::StrCat("hapctl run printed no JSON (", e.what(), "): ", r.out);
    return nlohmann::json::object();
  }
}

std::vector<int32_t> HapctlTokenIds(const std::string& model_dir, const Ask& ask,
                                    std::string* error) {
  const nlohmann::json run = HapctlRun(model_dir, ask, error);
  if (!error->empty()) return {};
  return run["token_ids"].get<std::vector<int32_t>>();
}

Ask MethodAsk(const std::string& method) {
  return Ask{.method = method, .retain = method == "none" ? "" : "8", .seed = 3};
}

Ask SampledHapAsk() {
  return Ask{.method = "hap",
             .retain = "50%",
             .max_new_tokens = 24,
             .temperature = 0.8f,
             .top_p = 0.9f,
             .top_k = 40,
             .seed = 7};
}

std::optional<Ask> FindLongAsk(const std::string& model_dir, int min_tokens) {
  Ask ask{.method = "hap", .retain = "8", .max_new_tokens = 3000, .temperature = 0.7f};
  for (ask.seed = 1; ask.seed <= 30; ++ask.seed) {
    std::string error;
    const nlohmann::json run = HapctlRun(model_dir, ask, &error);
    if (error.empty() && static_cast<int>(run["token_ids"].size()) >= min_tokens) return ask;
  }
  return std::nullopt;
}

hap::v1::GenerateRequest ToRequest(const Ask& ask, const std::string& image) {
  hap::v1::GenerateRequest req;
  req.set_image(image);
  req.set_prompt(ask.prompt);
  req.set_max_new_tokens(ask.max_new_tokens);
  if (!ask.stop.empty()) req.add_stop(ask.stop);
  req.mutable_pruning()->set_method(ask.method);
  if (!ask.retain.empty()) req.mutable_pruning()->set_retain(ask.retain);
  req.mutable_pruning()->set_seed(ask.seed);
  hap::v1::Sampling* s = req.mutable_sampling();
  s->set_temperature(ask.temperature);
  s->set_top_p(ask.top_p);
  s->set_top_k(ask.top_k);
  s->set_seed(ask.seed);
  return req;
}

bool Idle(sdk::Client* client, std::chrono::milliseconds timeout) {
  auto st = client->GetState(timeout);
  return st.ok() && sdk::HoldsNothing(*st);
}

bool Idle(const std::string& address) {
  auto c = sdk::Client::Connect(address);
  return c.ok() && Idle(c->get(), std::chrono::milliseconds(1000));
}

absl::StatusOr<int> PrefillMetricsPort(sdk::LocalPipeline* pipeline) {
  const auto port_line = [](const std::string& l) {
    return l.find("hap-prefill metrics on ") != std::string::npos;
  };
  absl::StatusOr<std::string> line = pipeline->process(sdk::Service::kPrefill)
                                         ->WaitForLine(port_line, std::chrono::milliseconds(100));
  if (!line.ok()) return line.status();
  int port = 0;
  if (!absl::SimpleAtoi(line->substr(line->rfind(':') + 1), &port)) {
    return absl::InternalError(absl::StrCat("no port in \"", *line, "\""));
  }
  return port;
}

double ScrapeMetric(int port, const std::string& series, double absent) {
  absl::StatusOr<telemetry::HttpResult> r =
      telemetry::HttpGet({"127.0.0.1", port, "/metrics"}, std::chrono::seconds(10));
  if (!r.ok() || r->status != 200) return -1;
  const size_t at = r->body.find("\n" + series + " ");
  if (at == std::string::npos) return absent;
  const size_t begin = at + series.size() + 2;
  double v = -1;
  if (!absl::SimpleAtod(r->body.substr(begin, r->body.find('\n', begin) - begin), &v)) return -1;
  return v;
}

std::optional<double> WaitUntil(const std::function<bool()>& done,
                                std::chrono::milliseconds timeout) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (done()) return ms;
    if (ms > timeout.count()) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void ExpectSameAsRun(const std::string& model_dir, sdk::Client* client, const Ask& ask,
                     hap::v1::GenerateStats* stats) {
  SCOPED_TRACE(absl::StrCat("method ", ask.method, " retain '", ask.retain, "' temperature ",
                            ask.temperature, " image ", ask.image_path, " kv ", ask.kv_dtype));
  std::string error;
  const nlohmann::json run = HapctlRun(model_dir, ask, &error);
  ASSERT_TRUE(error.empty()) << error;
  const std::string image = ReadBytes(ask.image_path.empty() ? TestImagePath() : ask.image_path);
  auto got = client->Generate(ToRequest(ask, image));
  ASSERT_TRUE(got.ok()) << got.status();
  const hap::v1::GenerateStats& s = got->stats;
  if (stats != nullptr) *stats = s;
  const std::vector<int32_t> want = run["token_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(Ids(s.token_ids()), want);
  // The streamed ids are the same minus a final EOS (never streamed as a delta).
  std::vector<int32_t> streamed = got->streamed_token_ids;
  if (s.finish_reason() == hap::v1::FINISH_REASON_EOS) streamed.push_back(want.back());
  EXPECT_EQ(streamed, want);
  EXPECT_EQ(got->text, run["text"].get<std::string>());
  EXPECT_EQ(s.text(), run["text"].get<std::string>());
  const nlohmann::json& pr = run["pruning"];
  EXPECT_EQ(s.method(), pr["method"].get<std::string>());
  EXPECT_EQ(s.prompt_tokens(), pr["prompt_tokens"].get<int>());
  EXPECT_EQ(s.image_visual_tokens(), pr["image_visual_tokens"].get<int>());
  EXPECT_EQ(Ids(s.layer_visual_tokens()), pr["layer_visual_tokens"].get<std::vector<int32_t>>());
  EXPECT_EQ(s.kv_bytes(), pr["kv_bytes"].get<int64_t>());
  EXPECT_EQ(s.kv_bytes_unpruned(), pr["kv_bytes_unpruned"].get<int64_t>());
  EXPECT_EQ(s.kv_bytes_received(), s.kv_bytes());
  EXPECT_DOUBLE_EQ(s.average_visual_tokens(), pr["average_visual_tokens"].get<double>());
  EXPECT_DOUBLE_EQ(s.flops().paper(), pr["flops_paper"].get<double>());
  EXPECT_DOUBLE_EQ(s.flops().full(), pr["flops_full"].get<double>());
}

}  // namespace hap::e2e
