// hapctl generate: ask a running HAP serve front door (hap-prefill) about an image and stream the
// answer, printed like `hapctl run` (or as one JSON object with --json).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "nlohmann/json.hpp"
#include "base/status_macros.h"
#include "sdk/client.h"
#include "tools/hapctl/command.h"
#include "tools/hapctl/flags.h"
#include "tools/hapctl/run_options.h"

namespace hap::cli {
namespace {

std::string FinishName(hap::v1::FinishReason r) {
  switch (r) {
    case hap::v1::FINISH_REASON_EOS:
      return "eos";
    case hap::v1::FINISH_REASON_STOP:
      return "stop";
    case hap::v1::FINISH_REASON_LENGTH:
      return "length";
    case hap::v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    default:
      return "unknown";
  }
}

// The flags of `hapctl run`, parsed the same way. The budget travels as given: a "--retain 5.6%"
// percentage is resolved by the server, which knows the model's visual tokens. Without --method
// a budget or --paq-temperature means "hap" (as for run); with neither, the server's default
// pruning applies.
absl::StatusOr<hap::v1::GenerateRequest> BuildRequest(const Flags& flags) {
  HAP_ASSIGN_OR_RETURN(GenerateRequest local, ParseGenerateRequest(flags, /*n_visual_tokens=*/1));
  hap::v1::GenerateRequest req;
  req.set_request_id(flags.GetOr("request-id", ""));
  req.set_image(std::move(local.image_bytes));
  req.set_prompt(local.prompt);
  req.set_max_new_tokens(local.stop.max_new_tokens);
  for (const std::string& s : local.stop.stop_strings) req.add_stop(s);
  hap::v1::Sampling* s = req.mutable_sampling();
  s->set_temperature(local.sampling.temperature);
  s->set_top_p(local.sampling.top_p);
  s->set_top_k(local.sampling.top_k);
  s->set_seed(local.sampling.seed);
  hap::v1::Pruning* p = req.mutable_pruning();
  const auto retain = flags.Get("retain");
  const bool budget = retain.has_value() || flags.Has("flops");
  p->set_method(flags.GetOr("method", (budget || flags.Has("paq-temperature")) ? "hap" : ""));
  if (retain) p->set_retain(*retain);
  if (local.prune.flops) p->set_flops(*local.prune.flops);
  p->set_seed(local.prune.seed);
  if (flags.Has("paq-temperature")) p->set_paq_temperature(local.prune.paq_temperature);
  return req;
}

absl::StatusOr<sdk::ClientOptions> ClientOptionsFrom(const Flags& flags) {
  sdk::ClientOptions o;
  o.tls.enabled = flags.Bool("tls") || flags.Has("tls-ca") || flags.Has("tls-cert");
  o.tls.root_certs_file = flags.GetOr("tls-ca", "");
  o.tls.client_cert_file = flags.GetOr("tls-cert", "");
  o.tls.client_key_file = flags.GetOr("tls-key", "");
  o.tls.server_name_override = flags.GetOr("tls-server-name", "");
  HAP_ASSIGN_OR_RETURN(int64_t retries, flags.Int("retries", 4));
  if (retries < 1) return absl::InvalidArgumentError("--retries must be >= 1");
  o.retry.max_attempts = static_cast<int>(retries);
  // The bearer token of a front door with authentication: from a file (preferred), else
  // $HAP_TOKEN. Never a flag: a command line is visible to every user of the machine.
  if (auto file = flags.Get("token-file")) {
    HAP_ASSIGN_OR_RETURN(o.bearer_token,
                         sdk::ReadTokenFile(*file, flags.GetOr("token-client", "")));
  } else if (flags.Has("token-client")) {
    return absl::InvalidArgumentError("--token-client needs --token-file");
  } else if (const char* env = std::getenv("HAP_TOKEN"); env != nullptr && *env != '\0') {
    o.bearer_token = env;
  }
  return o;
}

nlohmann::json ResultJson(const sdk::GenerateResult& r) {
  const hap::v1::GenerateStats& s = r.stats;
  const hap::v1::StageTimings& t = s.timings();
  nlohmann::json stages = nlohmann::json::array();
  for (const hap::v1::PruneStage& st : s.stages()) {
    stages.push_back({{"after_layer", st.after_layer()},
                      {"tokens_before", st.tokens_before()},
                      {"tokens_kept", st.tokens_kept()}});
  }
  nlohmann::json j;
  j["text"] = s.text();
  j["token_ids"] = std::vector<int32_t>(s.token_ids().begin(), s.token_ids().end());
  j["finish_reason"] = FinishName(s.finish_reason());
  j["request_id"] = s.request_id();
  j["method"] = s.method();
  j["budget"] = s.budget();
  j["prompt_tokens"] = s.prompt_tokens();
  j["text_tokens"] = s.text_tokens();
  j["visual_tokens"] = s.visual_tokens();
  j["layer_visual_tokens"] =
      std::vector<int>(s.layer_visual_tokens().begin(), s.layer_visual_tokens().end());
  j["stages"] = stages;
  j["average_visual_tokens"] = s.average_visual_tokens();
  j["flops"] = {{"paper", s.flops().paper()},
                {"full", s.flops().full()},
                {"unpruned_paper", s.flops().unpruned_paper()},
                {"unpruned_full", s.flops().unpruned_full()}};
  j["kv_bytes"] = s.kv_bytes();
  j["kv_bytes_unpruned"] = s.kv_bytes_unpruned();
  j["kv_bytes_received"] = s.kv_bytes_received();
  j["kv_chunks"] = s.kv_chunks();
  j["attempts"] = r.attempts;
  j["timings"] = {{"queue_ms", t.queue_ms()},
                  {"preprocess_ms", t.preprocess_ms()},
                  {"encode_ms", t.encode_ms()},
                  {"encode_rpc_ms", t.encode_rpc_ms()},
                  {"prefill_ms", t.prefill_ms()},
                  {"score_select_ms", t.score_select_ms()},
                  {"kv_transfer_ms", t.kv_transfer_ms()},
                  {"ttft_ms", t.ttft_ms()},
                  {"decode_ms", t.decode_ms()},
                  {"total_ms", t.total_ms()},
                  {"prefill_tokens_per_s", t.prefill_tokens_per_s()},
                  {"decode_tokens_per_s", t.decode_tokens_per_s()},
                  {"client_ttft_ms", r.ttft_ms}};
  return j;
}

void PrintSummary(const sdk::GenerateResult& r) {
  const hap::v1::GenerateStats& s = r.stats;
  const hap::v1::StageTimings& t = s.timings();
  std::printf(
      "-- finish: %s | preprocess %.1f ms | encode %.1f ms | prefill %.1f ms (%d tokens, %.0f "
      "tok/s) | KV %.1f ms | decode %d tokens, %.1f tok/s | TTFT %.1f ms\n",
      FinishName(s.finish_reason()).c_str(), t.preprocess_ms(), t.encode_ms(), t.prefill_ms(),
      s.prompt_tokens(), t.prefill_tokens_per_s(), t.kv_transfer_ms(), s.token_ids_size(),
      t.decode_tokens_per_s(), t.ttft_ms());
  std::printf(
      "-- %s%s%s: %.1f visual tokens per layer on average (of %d) | KV cache %lld of %lld "
      "bytes unpruned\n",
      s.method().c_str(), s.budget().empty() ? "" : " ", s.budget().c_str(),
      s.average_visual_tokens(), s.image_visual_tokens(), static_cast<long long>(s.kv_bytes()),
      static_cast<long long>(s.kv_bytes_unpruned()));
}

int CmdGenerate(const std::vector<std::string>& args) {
  std::set<std::string> value_flags = {
      "server",      "image",      "prompt",     "deadline-ms", "request-id",
      "retries",     "tls-ca",     "tls-cert",   "tls-key",     "tls-server-name",
      "traceparent", "tracestate", "token-file", "token-client"};
  AddGenerationFlags(&value_flags);
  auto flags = Flags::Parse(args, value_flags, {"json", "tls"});
  if (!flags.ok()) return Fail("generate", flags.status());
  auto server = flags->Required("server");
  if (!server.ok()) return Fail("generate", server.status());
  auto request = BuildRequest(*flags);
  if (!request.ok()) return Fail("generate", request.status());
  auto options = ClientOptionsFrom(*flags);
  if (!options.ok()) return Fail("generate", options.status());
  auto deadline = flags->Int("deadline-ms", 0);
  if (!deadline.ok()) return Fail("generate", deadline.status());
  auto client = sdk::Client::Connect(*server, *options);
  if (!client.ok()) return Fail("generate", client.status());

  const bool json = flags->Bool("json");
  sdk::StreamOptions stream;
  if (*deadline > 0) stream.timeout = std::chrono::milliseconds(*deadline);
  // W3C trace context to continue (the services check it; a malformed one starts a new trace).
  for (const char* key : {"traceparent", "tracestate"}) {
    if (auto v = flags->Get(key)) stream.metadata.emplace_back(key, *v);
  }
  if (!json) {
    stream.on_delta = [](const hap::v1::TextDelta& d) {
      std::fwrite(d.text().data(), 1, d.text().size(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  auto result = (*client)->Generate(*request, stream);
  if (!result.ok()) {
    if (!json) std::fputc('\n', stdout);
    return Fail("generate", result.status());
  }
  if (json) {
    std::printf("%s\n", ResultJson(*result).dump().c_str());
  } else {
    std::printf("\n");
    PrintSummary(*result);
  }
  return 0;
}

}  // namespace

HAP_COMMAND(generate, "Ask a running server (hap-prefill) about an image; streams the answer",
            CmdGenerate);

}  // namespace hap::cli
