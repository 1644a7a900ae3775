// Tracing for one process, configured the OpenTelemetry way: OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) turns it on; OTEL_EXPORTER_OTLP_PROTOCOL picks grpc
// (default) or http/protobuf; OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER/_ARG, OTEL_BSP_*,
// OTEL_EXPORTER_OTLP_TIMEOUT/_HEADERS, OTEL_RESOURCE_ATTRIBUTES as the SDKs read them;
// OTEL_SDK_DISABLED=true turns it off. Services may override the first five with flags.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "telemetry/batch_processor.h"
#include "telemetry/tracer.h"

namespace hap::telemetry {

struct TracingConfig {
  std::string service_name;  // resource service.name
  // "" = tracing off. For grpc: host:port (scheme optional). For http/protobuf: the base URL
  // ("/v1/traces" is appended) unless `endpoint_is_signal_url`.
  std::string endpoint;
  bool endpoint_is_signal_url = false;  // from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: used as is
  std::string protocol = "grpc";        // "grpc" | "http/protobuf"
  std::string sampler = "parentbased_always_on";
  std::string sampler_arg;
  BatchOptions batch;
  std::chrono::milliseconds export_timeout{10000};
  std::vector<std::pair<std::string, std::string>> headers;
  std::vector<std::pair<std::string, std::string>> resource_attributes;
  bool disabled = false;  // OTEL_SDK_DISABLED

  bool enabled() const { return !disabled && !endpoint.empty(); }
};

using GetEnv = std::function<const char*(const char*)>;

// The configuration the environment describes, `default_service_name` when OTEL_SERVICE_NAME is
// unset. InvalidArgument for a malformed value (named).
absl::StatusOr<TracingConfig> TracingConfigFromEnv(const std::string& default_service_name,
                                                   const GetEnv& getenv = nullptr);

// "k1=v1,k2=v2" with percent-encoded values (OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_RESOURCE_ATTRIBUTES).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseKeyValueList(
    const std::string& text);

// The running pipeline: exporter → batch processor → tracer, installed as the global tracer.
class Tracing {
 public:
  // Disabled config → a Tracing that does nothing (the global tracer stays disabled).
  // InvalidArgument for a bad endpoint, protocol or sampler.
  static absl::StatusOr<std::unique_ptr<Tracing>> Start(const TracingConfig& config,
                                                        bool install_global = true);
  ~Tracing();  // Shutdown(2 s)

  bool enabled() const { return processor_ != nullptr; }
  std::string Describe() const;  // one line for the startup log
  ExportStats stats() const;
  const Tracer& tracer() const { return *tracer_; }
  // Exports what was queued before the call; false if `timeout` passed first.
  bool ForceFlush(std::chrono::milliseconds timeout);
  // Exports what is queued (up to `timeout`), then stops; later spans are dropped.
  void Shutdown(std::chrono::milliseconds timeout);

 private:
  Tracing() = default;
  TracingConfig config_;
  std::string target_;
  std::shared_ptr<BatchSpanProcessor> processor_;
  std::shared_ptr<Tracer> tracer_ = std::make_shared<Tracer>();
};

}  // namespace hap::telemetry
