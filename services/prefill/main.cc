// hap-prefill: the front door (hap.v1.Generation). It calls hap-encoder for the embeddings, runs
// the pruned prefill and hands the KV cache to hap-decode, relaying the tokens back.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/compute_gate.h"
#include "base/status_macros.h"
#include "rpc/credentials.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/pipeline.h"
#include "services/auth/token_auth.h"
#include "services/openai/openai_server.h"
#include "services/prefill/prefill_service.h"
#include "services/server/gpu_budget.h"
#include "services/server/model_loader.h"
#include "services/server/service_host.h"
#include "services/server/status.h"
#include "services/wire/proto_convert.h"

namespace hap::svc {
namespace {

std::vector<OptionSpec> Specs() {
  std::vector<OptionSpec> specs = CommonOptionSpecs();
  // Bursts land on the front door. A queued request holds its request bytes and no thread or
  // core, so the queue is long: 16 running + 128 waiting take a burst of 144 at once, the last
  // waiting about 128 prefills (~6 s for the default model on 2 cores, well under a minute for
  // LLaVA-1.5-7B on a GPU). Encoder and decode see at most the front door's running requests
  // and keep the common 16.
  for (OptionSpec& s : specs) {
    if (s.flag == "queue-length") s.default_value = "128";
  }
  specs.push_back({"encoder-addr", "HAP_ENCODER_ADDR", "",
                   "hap-encoder address(es), host:port[,host:port...] (required); each call goes "
                   "to the replica with the fewest calls in flight"});
  specs.push_back({"decode-addr", "HAP_DECODE_ADDR", "",
                   "hap-decode address(es), host:port[,host:port...] (required); each call goes "
                   "to the replica reporting the most free KV memory (--decode-poll-ms), else as "
                   "above"});
  specs.push_back({"decode-poll-ms", "HAP_DECODE_POLL_MS", "250",
                   "ask each hap-decode for its free KV memory this often; 0 = off (fewest calls "
                   "in flight only)"});
  specs.push_back({"peer-refresh-ms", "HAP_PEER_REFRESH_MS", "5000",
                   "resolve the encoder and decode names this often and treat each address a "
                   "name resolves to (each pod of a headless Service) as a replica of its own; "
                   "0 = off (gRPC spreads calls over a name's addresses by itself)"});
  specs.push_back(MaxImageBytesSpec());
  specs.push_back({"max-prompt-tokens", "HAP_MAX_PROMPT_TOKENS", "0",
                   "longest prompt, visual tokens included; 0 = the model's context length"});
  specs.push_back({"method", "HAP_METHOD", "hap", "default pruning method"});
  specs.push_back({"retain", "HAP_RETAIN", "33.3%",
                   "default budget: average visual tokens per layer (64) or a percentage (11.1%)"});
  specs.push_back(
      {"flops", "HAP_FLOPS", "", "default budget as a FLOPs fraction instead of --retain (0.25)"});
  specs.push_back({"peer-tls-ca", "HAP_PEER_TLS_CA", "",
                   "PEM roots: call hap-encoder and hap-decode over TLS, verified against these"});
  specs.push_back({"peer-tls-cert", "HAP_PEER_TLS_CERT", "",
                   "PEM client certificate for mutual TLS to the peers (with --peer-tls-key)"});
  specs.push_back({"peer-tls-key", "HAP_PEER_TLS_KEY", "", "PEM private key of --peer-tls-cert"});
  specs.push_back({"peer-tls-server-name", "HAP_PEER_TLS_SERVER_NAME", "",
                   "name the peers' certificates carry, when it differs from their addresses"});
  specs.push_back({"kv-lease-ms", "HAP_KV_LEASE_MS", "30000",
                   "a KV cache waiting for its transfer to decode is freed after this"});
  specs.push_back({"max-stream-queue", "HAP_MAX_STREAM_QUEUE", "4096",
                   "Generate messages (tokens) waiting for a client that stopped reading, at "
                   "most; beyond it the call is cut off with RESOURCE_EXHAUSTED"});
  specs.push_back({"prefill-chunk-tokens", "HAP_PREFILL_CHUNK_TOKENS", "256",
                   "a prefill hands the compute to prefills waiting behind it after each slice "
                   "of decoder layers worth this many prompt tokens; 0 = never (whole prefills, "
                   "first come first served)"});
  specs.push_back({"prefill-batch-tokens", "HAP_PREFILL_BATCH_TOKENS", "0",
                   "requests that reach the prefill together run as one batched pass of at "
                   "most this many prompt tokens (a longer prompt runs alone, in slices of "
                   "this many tokens' work; pays on a GPU, where one prompt leaves it idle); "
                   "0 = off (one prefill at a time, in --prefill-chunk-tokens slices)"});
  specs.push_back({"kv-handover", "HAP_KV_HANDOVER", "auto",
                   "with --device cuda, auto: hand the KV cache to a hap-decode on the same GPU "
                   "through CUDA IPC (no copy through the host; a decode that cannot map it gets "
                   "the rows); stream: always send the rows"});
  specs.push_back({"max-active-prefills", "HAP_MAX_ACTIVE_PREFILLS", "4",
                   "prefills started and not finished at once (each holds its activations and KV "
                   "cache while others take their slices); 0 = no bound"});
  specs.push_back(MaxKvBytesSpec());
  specs.push_back({"kv-dtype", "HAP_KV_DTYPE", "f32",
                   "KV cache element type the prefill writes and sends to hap-decode: f32, or "
                   "bf16 (half the memory and transfer; give hap-decode the same)"});
  specs.push_back(GpuMemorySpec(
      "startup fails when the weights and the CUDA runtime do not fit in it. Empty = no budget"));
  specs.push_back(AttentionDTypeSpec("the prefill attention's"));
  specs.push_back({"openai-port", "HAP_OPENAI_PORT", "",
                   "serve the OpenAI-compatible HTTP API (/v1/chat/completions, /v1/models) on "
                   "this port; 0 = a free port; empty = off"});
  specs.push_back({"served-model-name", "HAP_SERVED_MODEL_NAME", "",
                   "the model id of the OpenAI API (default: the model directory's name)"});
  specs.push_back({"auth-tokens-file", "HAP_AUTH_TOKENS_FILE", "",
                   "file of 'client-id:token' lines: every Generate call, the OpenAI API and "
                   "Debug then need 'authorization: Bearer <token>' (health, reflection and "
                   "/metrics stay open); re-read on SIGHUP and when it changes; unset = off"});
  specs.push_back({"auth-max-concurrent-per-client", "HAP_AUTH_MAX_CONCURRENT_PER_CLIENT", "0",
                   "requests one client (token file entry) may have in flight; beyond it "
                   "RESOURCE_EXHAUSTED; 0 = no per-client limit"});
  return specs;
}

absl::StatusOr<hap::v1::Pruning> DefaultPruning(const Options& options) {
  hap::v1::Pruning p;
  p.set_method(options.Get("method"));
  const bool flops = !options.Get("flops").empty();
  const bool retain = !options.Get("retain").empty();
  if (flops && retain && options.IsSet("retain")) {
    return absl::InvalidArgumentError("give one default budget: --retain or --flops");
  }
  if (flops) {  // over the built-in default retain
    auto value = options.Double("flops");
    if (!value.ok()) return value.status();
    p.set_flops(*value);
  } else if (retain) {
    p.set_retain(options.Get("retain"));
  }
  return p;
}

// Bearer tokens from --auth-tokens-file (null when not given). The tokens themselves are never
// taken from the command line or the environment: both are visible to other processes and
// neither can be changed without a restart, which revoking a token must not need.
absl::StatusOr<std::unique_ptr<TokenAuth>> StartAuth(const Options& options,
                                                     const std::string& program) {
  if (const char* inline_tokens = std::getenv("HAP_AUTH_TOKENS");
      inline_tokens != nullptr && *inline_tokens != '\0') {
    return absl::InvalidArgumentError(
        "HAP_AUTH_TOKENS is not supported: put the 'client-id:token' lines in a file (a mounted "
        "secret) and name it in HAP_AUTH_TOKENS_FILE or --auth-tokens-file");
  }
  HAP_ASSIGN_OR_RETURN(int64_t per_client,
                       options.Int("auth-max-concurrent-per-client", 0, 1 << 20));
  if (options.Get("auth-tokens-file").empty()) {
    if (per_client > 0) {
      return absl::InvalidArgumentError(
          "--auth-max-concurrent-per-client needs --auth-tokens-file: clients are known by "
          "their tokens");
    }
    return nullptr;
  }
  TokenAuthOptions o;
  o.tokens_file = options.Get("auth-tokens-file");
  o.max_concurrent_per_client = static_cast<int>(per_client);
  o.program = program;
  HAP_ASSIGN_OR_RETURN(std::unique_ptr<TokenAuth> auth, TokenAuth::Start(o));
  std::printf("%s auth on: %zu tokens from %s%s\n", program.c_str(), auth->token_count(),
              o.tokens_file.c_str(),
              per_client > 0
                  ? absl::StrCat(", at most ", per_client, " requests in flight per client").c_str()
                  : "");
  std::fflush(stdout);
  return auth;
}

// The OpenAI-compatible HTTP API over this process's own Generation service.
absl::StatusOr<std::unique_ptr<openai::OpenAiServer>> StartOpenAi(const Options& options,
                                                                  const CommonOptions& common,
                                                                  const VisionLanguageModel& model,
                                                                  const TokenAuth* auth,
                                                                  ServiceHost* host) {
  HAP_ASSIGN_OR_RETURN(ChatTemplate chat_template, ChatTemplate::ForModelDir(model.dir()));
  HAP_ASSIGN_OR_RETURN(int64_t port, options.Int("openai-port", 0, 65535));
  HAP_ASSIGN_OR_RETURN(int64_t max_image, options.Int("max-image-bytes", 1, 1LL << 31));
  openai::OpenAiServerOptions o;
  o.host = common.host;
  o.port = static_cast<int>(port);
  // Every admitted request (running + queued) holds a connection; a few more answer refusals.
  o.threads = static_cast<int>(common.max_concurrent + common.queue_length + 4);
  o.chat.model_id = options.Get("served-model-name");
  if (o.chat.model_id.empty()) {
    const std::string& dir = model.dir();
    const size_t end = dir.find_last_not_of('/');
    const size_t slash = dir.find_last_of('/', end);
    o.chat.model_id = dir.substr(slash == std::string::npos ? 0 : slash + 1,
                                 end == std::string::npos ? 0 : end - (slash + 1) + 1);
  }
  o.chat.max_image_bytes = max_image;
  o.auth = auth;
  o.chat.chat_template = std::make_shared<const ChatTemplate>(std::move(chat_template));
  HAP_ASSIGN_OR_RETURN(o.chat.defaults, openai::GenerationDefaults::ForModelDir(model.dir()));
  const Tokenizer& tokenizer = model.language().tokenizer();
  o.chat.bos_token = tokenizer.IdToPiece(tokenizer.bos_id());
  o.chat.eos_token = tokenizer.IdToPiece(tokenizer.eos_id());
  o.chat.image_placeholder = std::string(model.image_placeholder());
  // Where the rendered prompt is read with special tokens recognized, a message cannot spell one.
  if (model.rendered_prompt_reads_special_tokens()) o.chat.control_tokens = &tokenizer;
  auto server = std::make_unique<openai::OpenAiServer>(o, host->InProcessChannel());
  HAP_RETURN_IF_ERROR(server->Start());
  std::printf("%s openai on %s:%d (model '%s', chat template: %s)\n", host->name().c_str(),
              common.host.c_str(), server->port(), o.chat.model_id.c_str(),
              o.chat.chat_template->origin().c_str());
  std::fflush(stdout);
  return server;
}

int Serve(ServiceHost& host, const Options& options, const CommonOptions& common) {
  PrefillConfig config;
  if (options.Get("encoder-addr").empty() || options.Get("decode-addr").empty()) {
    return StartupFailure(
        host.name(), absl::InvalidArgumentError("--encoder-addr and --decode-addr are required"));
  }
  auto encoders = SplitAddresses(options.Get("encoder-addr"), "encoder-addr");
  auto decoders = SplitAddresses(options.Get("decode-addr"), "decode-addr");
  if (!encoders.ok()) return StartupFailure(host.name(), encoders.status());
  if (!decoders.ok()) return StartupFailure(host.name(), decoders.status());
  config.encoder_addresses = *encoders;
  config.decode_addresses = *decoders;
  config.max_message_bytes = common.max_message_bytes;
  auto max_image = options.Int("max-image-bytes", 1, 1LL << 31);
  auto max_prompt = options.Int("max-prompt-tokens", 0, 1 << 24);
  auto lease = options.Int("kv-lease-ms", 1, 3600 * 1000);
  auto max_kv = options.Int("max-kv-bytes", 0, int64_t{1} << 50);
  auto poll = options.Int("decode-poll-ms", 0, 3600 * 1000);
  auto refresh = options.Int("peer-refresh-ms", 0, 3600 * 1000);
  auto max_stream_queue = options.Int("max-stream-queue", 1, 1 << 24);
  auto chunk_tokens = options.Int("prefill-chunk-tokens", 0, 1 << 24);
  auto max_active = options.Int("max-active-prefills", 0, 1 << 16);
  auto batch_tokens = options.Int("prefill-batch-tokens", 0, 1 << 24);
  auto pruning = DefaultPruning(options);
  for (const absl::Status& s :
       {max_image.status(), max_prompt.status(), lease.status(), max_kv.status(), poll.status(),
        refresh.status(), max_stream_queue.status(), chunk_tokens.status(), max_active.status(),
        batch_tokens.status(), pruning.status()}) {
    if (!s.ok()) return StartupFailure(host.name(), s);
  }
  const absl::StatusOr<DType> kv_dtype =
      ParseKvDTypeFlagValue("--kv-dtype", options.Get("kv-dtype"));
  if (!kv_dtype.ok()) return StartupFailure(host.name(), kv_dtype.status());
  const std::string handover = options.Get("kv-handover");
  if (handover != "auto" && handover != "stream") {
    return StartupFailure(host.name(),
                          absl::InvalidArgumentError(absl::StrCat(
                              "--kv-handover must be auto or stream, got '", handover, "'")));
  }
  config.kv_handover = handover == "auto" && common.device == "cuda";
  const absl::StatusOr<int64_t> gpu_budget = GpuBudgetFromOptions(options, common);
  if (!gpu_budget.ok()) return StartupFailure(host.name(), gpu_budget.status());
  config.max_image_bytes = *max_image;
  config.lease_ms = *lease;
  config.decode_poll_ms = *poll;
  config.peer_refresh_ms = *refresh;
  config.max_stream_queue = static_cast<size_t>(*max_stream_queue);
  config.prefill_chunk_tokens = static_cast<int>(*chunk_tokens);
  config.prefill_batch_tokens = static_cast<int>(*batch_tokens);
  ProcessComputeGate().set_max_started(static_cast<int>(*max_active));
  config.default_pruning = *pruning;
  rpc::TlsOptions peer_tls;
  peer_tls.root_certs_file = options.Get("peer-tls-ca");
  peer_tls.client_cert_file = options.Get("peer-tls-cert");
  peer_tls.client_key_file = options.Get("peer-tls-key");
  peer_tls.enabled = !peer_tls.root_certs_file.empty() || !peer_tls.client_cert_file.empty();
  if (peer_tls.enabled) {
    auto creds = rpc::MakeCredentials(peer_tls);
    if (!creds.ok()) return StartupFailure(host.name(), creds.status());
    config.peer_credentials = *creds;
  }
  config.peer_server_name = options.Get("peer-tls-server-name");

  // Before the server listens: a bad tokens file stops the start, naming the file and line.
  auto auth = StartAuth(options, host.name());
  if (!auth.ok()) return StartupFailure(host.name(), auth.status());

  std::unique_ptr<VisionLanguageModel> model;
  WorkerPool pool(common.max_concurrent, common.queue_length);
  KvRegistry kv(*max_kv);
  host.state().Attach(&pool, &kv);
  PrefillService service(&host.state(), &pool, &kv, config);
  service.SetAuth(auth->get());
  host.RequireTokenForDebug(auth->get());
  const int max_receive = static_cast<int>(
      std::max<int64_t>(common.max_message_bytes, config.max_image_bytes + (64 << 10)));
  if (absl::Status s = host.Start(common, {&service}, max_receive); !s.ok()) {
    return StartupFailure(host.name(), s);
  }
  ModelOptions model_options;
  model_options.parts = ModelParts::kLanguage;  // the encoder service holds the vision tower
  model_options.max_prompt_tokens = static_cast<int>(*max_prompt);
  model_options.kv_dtype = *kv_dtype;
  model_options.shareable_kv = config.kv_handover;
  const absl::StatusOr<std::optional<DType>> attention_dtype =
      ParseAttentionDTypeFlagValue("--attention-dtype", options.Get("attention-dtype"));
  if (!attention_dtype.ok()) return StartupFailure(host.name(), attention_dtype.status());
  model_options.attention_dtype = *attention_dtype;
  auto loaded = LoadServiceModel(host.name(), common, model_options);
  if (!loaded.ok()) return host.Fail(loaded.status());
  model = std::move(*loaded);
  if (*gpu_budget > 0) {
    // What the prefills' activations and KV caches have left once the weights are in.
    absl::StatusOr<GpuMemoryPlan> plan = PlanGpuMemory(
        "--gpu-memory", *gpu_budget, model->language().backend().DeviceBytesInUse(), 0, 1);
    if (!plan.ok()) return host.Fail(plan.status());
    std::fprintf(stderr, "%s: GPU memory %s (left for the prefills' activations and KV caches)\n",
                 host.name().c_str(), DescribeGpuMemoryPlan(*plan).c_str());
  }
  // A default budget this model cannot reach would fail every request: refuse to start. (For
  // Qwen2.5-VL, whose images give different counts, it is checked on the warm-up image's.)
  const absl::StatusOr<int> visual_tokens = model->reference_visual_tokens();
  if (!visual_tokens.ok()) return host.Fail(visual_tokens.status());
  auto prune = PruneFromProto(hap::v1::Pruning(), config.default_pruning, *visual_tokens);
  absl::Status ok = prune.ok()
                        ? model->ValidateRequest("default pruning check", *prune, *visual_tokens)
                        : prune.status();
  if (!ok.ok()) return host.Fail(Annotate(ok, "default pruning (--method/--retain/--flops)"));
  if (common.warm_up) {
    // The default method's path: its kernels, the planned steps, the sampling.
    // With batching on, two prompts in one pass: the batched path's plans and kernels too.
    const int prompts = config.prefill_batch_tokens > 0 ? 2 : 1;
    absl::StatusOr<double> ms = model->WarmUpPrefill(*prune, prompts);
    if (!ms.ok()) return host.Fail(Annotate(ms.status(), "warm-up request"));
    std::fprintf(stderr, "%s: warm-up request (%s, %s) in %.1f ms\n", host.name().c_str(),
                 prompts > 1 ? "a batched pass of 2 prefills" : "a prefill", prune->method.c_str(),
                 *ms);
  }
  service.SetModel(model.get());
  std::unique_ptr<openai::OpenAiServer> openai;
  if (!options.Get("openai-port").empty()) {
    auto started = StartOpenAi(options, common, *model, auth->get(), &host);
    if (!started.ok()) return host.Fail(started.status());
    openai = std::move(*started);
  }
  host.SetServing();
  const int code = host.WaitAndDrain(common.drain_timeout_ms);
  if (openai != nullptr) openai->Stop();
  return code;
}

}  // namespace
}  // namespace hap::svc

int main(int argc, char** argv) {
  return hap::svc::RunService("hap-prefill", argc, argv, hap::svc::Specs(), hap::svc::Serve);
}
