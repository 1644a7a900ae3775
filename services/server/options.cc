#include "services/server/options.h"

#include <cstdlib>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "base/status_macros.h"
#include "runtime/io/model_dir.h"

namespace hap::svc {

absl::StatusOr<Options> Options::Parse(const std::vector<std::string>& args,
                                       const std::vector<OptionSpec>& specs) {
  Options out;
  std::set<std::string> names;
  for (const OptionSpec& s : specs) {
    names.insert(s.flag);
    if (const char* env = std::getenv(s.env.c_str()); env != nullptr && *env != '\0') {
      out.values_[s.flag] = env;
      out.sources_[s.flag] = "$" + s.env;
    }
  }
  std::vector<std::string> flag_args;
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") {
      out.help_ = true;
    } else {
      flag_args.push_back(arg);
    }
  }
  absl::StatusOr<Flags> flags = Flags::Parse(flag_args, names, /*bool_flags=*/{});
  if (!flags.ok()) {
    if (absl::StartsWith(flags.status().message(), "unknown flag")) {
      return absl::InvalidArgumentError(absl::StrCat(flags.status().message(), " (see --help)"));
    }
    return flags.status();
  }
  for (const std::string& name : names) {
    if (std::optional<std::string> value = flags->Get(name)) {
      out.values_[name] = *value;
      out.sources_[name] = "--" + name;
    }
  }
  for (const OptionSpec& s : specs) {
    if (!out.values_.count(s.flag)) out.values_[s.flag] = s.default_value;
  }
  return out;
}

std::string Options::Get(const std::string& flag) const {
  auto it = values_.find(flag);
  return it == values_.end() ? "" : it->second;
}

bool Options::IsSet(const std::string& flag) const { return sources_.count(flag) > 0; }

bool Options::IsFlag(const std::string& flag) const {
  auto it = sources_.find(flag);
  return it != sources_.end() && it->second.rfind("--", 0) == 0;
}

absl::StatusOr<int64_t> Options::Int(const std::string& flag, int64_t min, int64_t max) const {
  const std::string v = Get(flag);
  auto src = sources_.find(flag);
  const std::string where = src == sources_.end() ? "--" + flag : src->second;
  int64_t out;
  if (!absl::SimpleAtoi(v, &out)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": '", v, "' is not an integer"));
  }
  if (out < min || out > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " must be in [", min, ", ", max, "], got ", out));
  }
  return out;
}

absl::StatusOr<bool> Options::OnOff(const std::string& flag) const {
  const std::string v = Get(flag);
  if (v == "on" || v == "off") return v == "on";
  auto src = sources_.find(flag);
  const std::string where = src == sources_.end() ? "--" + flag : src->second;
  return absl::InvalidArgumentError(absl::StrCat(where, " must be on or off, got '", v, "'"));
}

absl::StatusOr<double> Options::Double(const std::string& flag) const {
  const std::string v = Get(flag);
  double out;
  if (!absl::SimpleAtod(v, &out)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", v, "' is not a number"));
  }
  return out;
}

std::string Options::Usage(const std::string& program, const std::vector<OptionSpec>& specs) {
  std::string out = absl::StrCat("usage: ", program, " [flags]\n\nflags (environment variable):\n");
  for (const OptionSpec& s : specs) {
    absl::StrAppend(&out, absl::StrFormat("  --%-20s %s", s.flag, s.help));
    absl::StrAppend(&out, " (", s.env,
                    s.default_value.empty() ? "" : absl::StrCat("; default ", s.default_value),
                    ")\n");
  }
  return out;
}

std::vector<OptionSpec> CommonOptionSpecs() {
  return {
      {"host", "HAP_HOST", "0.0.0.0", "address to listen on"},
      {"port", "HAP_PORT", "0", "port to listen on; 0 picks a free one and prints it"},
      {"model", "HAP_MODEL_DIR", "", "llava-hf checkpoint directory (default: the bundled model)"},
      {"device", "HAP_DEVICE", "cpu",
       "compute backend: cpu, or cuda (a GPU; builds with the CUDA backend)"},
      {"threads", "HAP_THREADS", "0", "CPU threads for the model; 0 = all cores"},
      {"pool-spin-us", "HAP_POOL_SPIN_US", "50",
       "microseconds the compute threads spin for the next op before sleeping (0 = sleep at "
       "once); less where several services share few cores (hapctl up uses 12)"},
      {"max-concurrent", "HAP_MAX_CONCURRENT", "16",
       "requests in flight at once (hap-decode: sequences sharing one batched step); their "
       "compute stages take turns, one at a time per process"},
      {"warm-up", "HAP_WARM_UP", "on",
       "on: run one warm-up request before serving (its time in the log), so that the first "
       "request costs what later ones do; off: serve at once"},
      {"queue-length", "HAP_QUEUE_LENGTH", "16",
       "requests waiting for a worker; beyond it RESOURCE_EXHAUSTED"},
      {"max-message-bytes", "HAP_MAX_MESSAGE_BYTES", "4194304", "largest gRPC message"},
      {"drain-timeout-ms", "HAP_DRAIN_TIMEOUT_MS", "30000",
       "on SIGTERM, wait this long for in-flight requests before shutting down"},
      {"tls-cert", "HAP_TLS_CERT", "", "PEM certificate chain: serve TLS (with --tls-key)"},
      {"tls-key", "HAP_TLS_KEY", "", "PEM private key of --tls-cert"},
      {"tls-client-ca", "HAP_TLS_CLIENT_CA", "",
       "PEM roots: require client certificates they signed (mutual TLS)"},
      {"metrics-port", "HAP_METRICS_PORT", "",
       "serve Prometheus /metrics over HTTP on this port (0 = a free one, printed); unset = off"},
      {"health-port", "HAP_HEALTH_PORT", "",
       "also answer grpc.health.v1 Check, and nothing else, in plaintext on this port, for "
       "probes that cannot speak TLS (the kubelet's gRPC probe); 0 = a free one, printed; unset "
       "= off"},
      {"otlp-endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT", "",
       "OTLP collector: host:port for grpc, base URL for http/protobuf; unset = tracing off"},
      {"otlp-protocol", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc",
       "OTLP transport: grpc | http/protobuf"},
      {"service-name", "OTEL_SERVICE_NAME", "", "service.name of the spans (default: the binary)"},
      {"traces-sampler", "OTEL_TRACES_SAMPLER", "parentbased_always_on",
       "always_on | always_off | traceidratio | parentbased_* (follow the caller's decision)"},
      {"traces-sampler-arg", "OTEL_TRACES_SAMPLER_ARG", "", "the ratio for *traceidratio (0..1)"},
  };
}

OptionSpec MaxImageBytesSpec() {
  return {"max-image-bytes", "HAP_MAX_IMAGE_BYTES", "16777216",
          "largest encoded image accepted (RESOURCE_EXHAUSTED above)"};
}

OptionSpec MaxKvBytesSpec() {
  return {"max-kv-bytes", "HAP_MAX_KV_BYTES", "0",
          "KV cache bytes held at once; 0 = unlimited (RESOURCE_EXHAUSTED above)"};
}

OptionSpec AttentionDTypeSpec(const std::string& attention) {
  return {
      "attention-dtype", "HAP_ATTENTION_DTYPE", "auto",
      absl::StrCat(attention,
                   " operands: auto (the weights' type on cuda, f32 on cpu), f32, bf16 or f16")};
}

absl::StatusOr<CommonOptions> ReadCommonOptions(const Options& options) {
  CommonOptions c;
  c.host = options.Get("host");
  HAP_ASSIGN_OR_RETURN(int64_t port, options.Int("port", 0, 65535));
  c.port = static_cast<int>(port);
  c.model_dir = ResolveModelDir(options.Get("model"));
  c.device = options.Get("device");
  if (c.device != "cpu" && c.device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu or cuda, got '", c.device, "'"));
  }
  HAP_ASSIGN_OR_RETURN(int64_t threads, options.Int("threads", 0, 1024));
  c.threads = static_cast<int>(threads);
  HAP_ASSIGN_OR_RETURN(int64_t spin, options.Int("pool-spin-us", 0, 1000000));
  c.pool_spin_us = static_cast<int>(spin);
  HAP_ASSIGN_OR_RETURN(int64_t conc, options.Int("max-concurrent", 1, 4096));
  c.max_concurrent = static_cast<int>(conc);
  HAP_ASSIGN_OR_RETURN(c.warm_up, options.OnOff("warm-up"));
  HAP_ASSIGN_OR_RETURN(int64_t queue, options.Int("queue-length", 0, 1 << 20));
  c.queue_length = static_cast<int>(queue);
  HAP_ASSIGN_OR_RETURN(int64_t msg, options.Int("max-message-bytes", 4096, 1 << 30));
  c.max_message_bytes = static_cast<int>(msg);
  HAP_ASSIGN_OR_RETURN(c.drain_timeout_ms, options.Int("drain-timeout-ms", 0, 3600 * 1000));
  c.tls_cert_file = options.Get("tls-cert");
  c.tls_key_file = options.Get("tls-key");
  c.tls_client_ca_file = options.Get("tls-client-ca");
  if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!c.tls_client_ca_file.empty() && c.tls_cert_file.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  if (!options.Get("metrics-port").empty()) {
    HAP_ASSIGN_OR_RETURN(int64_t metrics_port, options.Int("metrics-port", 0, 65535));
    c.metrics_port = static_cast<int>(metrics_port);
  }
  if (!options.Get("health-port").empty()) {
    HAP_ASSIGN_OR_RETURN(int64_t health_port, options.Int("health-port", 0, 65535));
    c.health_port = static_cast<int>(health_port);
    if (c.health_port != 0 && c.health_port == c.port) {
      return absl::InvalidArgumentError(
          "--health-port must differ from --port: it serves health checks in plaintext");
    }
  }
  // Only what was given as a flag: the environment is read by the tracer itself, which also
  // knows the OTEL_* variables that have no flag (and their precedence).
  for (auto [flag, field] :
       {std::pair{"otlp-endpoint", &c.otlp_endpoint}, std::pair{"otlp-protocol", &c.otlp_protocol},
        std::pair{"service-name", &c.service_name}, std::pair{"traces-sampler", &c.traces_sampler},
        std::pair{"traces-sampler-arg", &c.traces_sampler_arg}}) {
    if (options.IsFlag(flag)) *field = options.Get(flag);
  }
  return c;
}

}  // namespace hap::svc
