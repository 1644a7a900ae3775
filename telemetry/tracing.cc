#include "telemetry/tracing.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "telemetry/otlp_exporters.h"

namespace hap::telemetry {
namespace {

std::string PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      uint8_t byte = 0;
      std::string hex = absl::AsciiStrToLower(std::string(s.substr(i + 1, 2)));
      if (FromHex(hex, &byte, 1)) {
        out.push_back(static_cast<char>(byte));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

absl::StatusOr<int64_t> EnvInt(const GetEnv& getenv, const char* name, int64_t fallback,
                               int64_t min) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  int64_t out = 0;
  if (!absl::SimpleAtoi(v, &out) || out < min) {
    return absl::InvalidArgumentError(absl::StrCat(name, "='", v, "' is not an integer >= ", min));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseKeyValueList(
    const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("'", item, "' is not key=value"));
    }
    const std::string key(absl::StripAsciiWhitespace(item.substr(0, eq)));
    if (key.empty()) return absl::InvalidArgumentError(absl::StrCat("'", item, "' has no key"));
    const absl::string_view value = absl::StripAsciiWhitespace(item.substr(eq + 1));
    out.emplace_back(key, PercentDecode(std::string_view(value.data(), value.size())));
  }
  return out;
}

absl::StatusOr<TracingConfig> TracingConfigFromEnv(const std::string& default_service_name,
                                                   const GetEnv& getenv_fn) {
  const GetEnv getenv = getenv_fn ? getenv_fn : [](const char* n) { return std::getenv(n); };
  auto get = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v == nullptr ? std::string() : std::string(absl::StripAsciiWhitespace(v));
  };
  TracingConfig c;
  c.service_name = get("OTEL_SERVICE_NAME");
  if (c.service_name.empty()) c.service_name = default_service_name;
  c.disabled = absl::AsciiStrToLower(get("OTEL_SDK_DISABLED")) == "true";
  if (std::string e = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); !e.empty()) {
    c.endpoint = e;
    c.endpoint_is_signal_url = true;
  } else {
    c.endpoint = get("OTEL_EXPORTER_OTLP_ENDPOINT");
  }
  std::string protocol = get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
  if (protocol.empty()) protocol = get("OTEL_EXPORTER_OTLP_PROTOCOL");
  if (!protocol.empty()) c.protocol = protocol;
  if (std::string s = get("OTEL_TRACES_SAMPLER"); !s.empty()) c.sampler = s;
  c.sampler_arg = get("OTEL_TRACES_SAMPLER_ARG");

  auto queue = EnvInt(getenv, "OTEL_BSP_MAX_QUEUE_SIZE", 2048, 1);
  auto batch = EnvInt(getenv, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, 1);
  auto delay = EnvInt(getenv, "OTEL_BSP_SCHEDULE_DELAY", 5000, 0);
  std::string timeout_name = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT";
  if (get(timeout_name.c_str()).empty()) timeout_name = "OTEL_EXPORTER_OTLP_TIMEOUT";
  auto timeout = EnvInt(getenv, timeout_name.c_str(), 10000, 1);
  for (const absl::Status& s : {queue.status(), batch.status(), delay.status(), timeout.status()}) {
    if (!s.ok()) return s;
  }
  c.batch.max_queue_size = static_cast<size_t>(*queue);
  c.batch.max_export_batch_size = static_cast<size_t>(*batch);
  c.batch.schedule_delay = std::chrono::milliseconds(*delay);
  c.export_timeout = std::chrono::milliseconds(*timeout);

  std::string headers = get("OTEL_EXPORTER_OTLP_TRACES_HEADERS");
  if (headers.empty()) headers = get("OTEL_EXPORTER_OTLP_HEADERS");
  auto parsed_headers = ParseKeyValueList(headers);
  if (!parsed_headers.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("OTEL_EXPORTER_OTLP_HEADERS: ", parsed_headers.status().message()));
  }
  c.headers = *parsed_headers;
  auto resource = ParseKeyValueList(get("OTEL_RESOURCE_ATTRIBUTES"));
  if (!resource.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("OTEL_RESOURCE_ATTRIBUTES: ", resource.status().message()));
  }
  c.resource_attributes = *resource;
  return c;
}

absl::StatusOr<std::unique_ptr<Tracing>> Tracing::Start(const TracingConfig& config,
                                                        bool install_global) {
  std::unique_ptr<Tracing> t(new Tracing());
  t->config_ = config;
  // The sampler is checked even when tracing is off, so a typo fails at startup.
  absl::StatusOr<TraceSampler> sampler = TraceSampler::Parse(config.sampler, config.sampler_arg);
  if (!sampler.ok()) return sampler.status();
  if (config.protocol != "grpc" && config.protocol != "http/protobuf") {
    return absl::InvalidArgumentError(
        absl::StrCat("OTLP protocol '", config.protocol, "' (grpc or http/protobuf)"));
  }
  if (!config.enabled()) return t;

  OtlpOptions options;
  options.timeout = config.export_timeout;
  options.headers = config.headers;
  std::vector<std::pair<std::string, std::string>> extra = config.resource_attributes;
  // OTEL_SERVICE_NAME (or the flag) wins over service.name in OTEL_RESOURCE_ATTRIBUTES.
  extra.erase(std::remove_if(extra.begin(), extra.end(),
                             [](const auto& kv) { return kv.first == "service.name"; }),
              extra.end());
  options.resource = Resource::ForService(config.service_name, extra);
  std::unique_ptr<SpanExporter> exporter;
  if (config.protocol == "grpc") {
    options.endpoint = config.endpoint;
    auto e = OtlpGrpcExporter::Create(options);
    if (!e.ok()) return e.status();
    exporter = std::move(*e);
  } else {
    options.endpoint = config.endpoint;
    if (!config.endpoint_is_signal_url) {
      while (!options.endpoint.empty() && options.endpoint.back() == '/') {
        options.endpoint.pop_back();
      }
      options.endpoint += "/v1/traces";
    }
    auto e = OtlpHttpExporter::Create(options);
    if (!e.ok()) return e.status();
    exporter = std::move(*e);
  }
  t->target_ = options.endpoint;
  t->processor_ = std::make_shared<BatchSpanProcessor>(std::move(exporter), config.batch);
  t->tracer_ = std::make_shared<Tracer>(*sampler, t->processor_);
  if (install_global) SetGlobalTracer(t->tracer_);
  return t;
}

Tracing::~Tracing() { Shutdown(std::chrono::seconds(2)); }

std::string Tracing::Describe() const {
  if (!enabled()) return "tracing off (set OTEL_EXPORTER_OTLP_ENDPOINT or --otlp-endpoint)";
  auto sampler = TraceSampler::Parse(config_.sampler, config_.sampler_arg);
  return absl::StrCat("tracing to ", target_, " (OTLP ",
                      config_.protocol == "grpc" ? "gRPC" : "HTTP/protobuf",
                      "), service.name=", config_.service_name, ", sampler ",
                      sampler.ok() ? sampler->Describe() : config_.sampler);
}

ExportStats Tracing::stats() const {
  return processor_ != nullptr ? processor_->stats() : ExportStats();
}

bool Tracing::ForceFlush(std::chrono::milliseconds timeout) {
  return processor_ == nullptr || processor_->ForceFlush(timeout);
}

void Tracing::Shutdown(std::chrono::milliseconds timeout) {
  if (processor_ != nullptr) processor_->Shutdown(timeout);
}

}  // namespace hap::telemetry
