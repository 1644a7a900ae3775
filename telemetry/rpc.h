// One gRPC call as telemetry sees it: a SERVER span (continuing the caller's W3C trace context)
// plus the request counter and latency histogram on the serving side, or a CLIENT span whose
// context travels in the outgoing metadata on the calling side. Errors set the span status with
// the gRPC message; rpc.* attributes follow the OpenTelemetry RPC conventions.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "grpcpp/grpcpp.h"
#include "telemetry/metrics.h"
#include "telemetry/span.h"
#include "telemetry/tracer.h"

namespace hap::telemetry {

// "OK", "INVALID_ARGUMENT", ... (the canonical names; label values of hap_requests_total).
const char* GrpcCodeName(grpc::StatusCode code);

// Per-process RPC metrics, on Registry::Default():
//   hap_requests_total{rpc, code}          counter: calls finished, by method and status code
//   hap_request_duration_seconds{rpc}      histogram: call start → status sent (end to end)
struct RpcMetrics {
  CounterFamily* requests;
  HistogramFamily* duration;
  static RpcMetrics& Default();
};

// Latency buckets (seconds) shared by the services' histograms: 1 ms … ~65 s.
std::vector<double> LatencyBuckets();

class ServerRpc {
 public:
  ServerRpc() = default;
  ServerRpc(const ServerRpc&) = delete;
  ServerRpc& operator=(const ServerRpc&) = delete;
  ~ServerRpc();  // an unfinished call counts as CANCELLED

  // `method` is the full name, "hap.v1.Generation/Generate".
  void Start(const grpc::ServerContextBase& ctx, std::string_view method,
             const Tracer& tracer = GlobalTracer());
  Span& span() { return span_; }
  const SpanContext& context() const { return span_.context(); }
  // Counts the call, records its latency, sets the span status and ends it. Idempotent.
  void Finish(const grpc::Status& status);

 private:
  std::string method_;
  Span span_;
  std::chrono::steady_clock::time_point start_;
  bool started_ = false, finished_ = false;
};

class ClientRpc {
 public:
  // Starts a CLIENT span under `parent` and puts its context in `ctx`'s metadata; call before
  // the stub starts the call. `peer` is "host:port".
  ClientRpc(const SpanContext& parent, std::string_view method, std::string_view peer,
            grpc::ClientContext* ctx, const Tracer& tracer = GlobalTracer());
  Span& span() { return span_; }
  const SpanContext& context() const { return span_.context(); }
  void Finish(const grpc::Status& status);

 private:
  Span span_;
};

}  // namespace hap::telemetry
