// The two OTLP span exporters: gRPC (opentelemetry.proto.collector.trace.v1.TraceService/Export)
// and HTTP with a protobuf body (POST .../v1/traces, application/x-protobuf). Each Export is one
// request with a deadline; Cancel() ends a stalled one.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.grpc.pb.h"
#include "telemetry/exporter.h"
#include "telemetry/http_client.h"
#include "telemetry/otlp_encoder.h"

namespace hap::telemetry {

struct OtlpOptions {
  // gRPC: "host:port", "http://host:port" (plaintext) or "https://host:port" (TLS with the
  // system roots). HTTP: the full URL of the traces resource ("http://host:4318/v1/traces").
  std::string endpoint;
  std::chrono::milliseconds timeout{10000};
  std::vector<std::pair<std::string, std::string>> headers;  // sent with every export
  Resource resource;
};

class OtlpGrpcExporter final : public SpanExporter {
 public:
  static absl::StatusOr<std::unique_ptr<OtlpGrpcExporter>> Create(const OtlpOptions& options);
  absl::Status Export(const SpanBatch& batch) override;
  void Cancel() override;

 private:
  OtlpGrpcExporter(
      const OtlpOptions& options,
      std::unique_ptr<opentelemetry::proto::collector::trace::v1::TraceService::Stub> stub)
      : options_(options), stub_(std::move(stub)) {}

  const OtlpOptions options_;
  std::unique_ptr<opentelemetry::proto::collector::trace::v1::TraceService::Stub> stub_;
  std::mutex mu_;
  grpc::ClientContext* in_flight_ = nullptr;
  bool cancelled_ = false;
};

class OtlpHttpExporter final : public SpanExporter {
 public:
  static absl::StatusOr<std::unique_ptr<OtlpHttpExporter>> Create(const OtlpOptions& options);
  absl::Status Export(const SpanBatch& batch) override;
  void Cancel() override { cancelled_ = true; }

 private:
  OtlpHttpExporter(const OtlpOptions& options, HttpUrl url) : options_(options), url_(url) {}
  const OtlpOptions options_;
  const HttpUrl url_;
  std::atomic<bool> cancelled_{false};
};

// "host:port" and whether to use TLS, from a gRPC endpoint as OTEL_EXPORTER_OTLP_ENDPOINT
// spells it (scheme optional, a trailing '/' ignored).
absl::StatusOr<std::pair<std::string, bool>> GrpcTarget(const std::string& endpoint);

}  // namespace hap::telemetry
