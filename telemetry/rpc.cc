#include "telemetry/rpc.h"

#include "absl/strings/numbers.h"
#include "telemetry/grpc_propagation.h"

namespace hap::telemetry {
namespace {

void SetRpcAttributes(Span& span, std::string_view method) {
  if (!span.recording()) return;
  const size_t slash = method.rfind('/');
  span.SetAttribute("rpc.system", "grpc");
  if (slash != std::string_view::npos) {
    span.SetAttribute("rpc.service", method.substr(0, slash));
    span.SetAttribute("rpc.method", method.substr(slash + 1));
  }
}

void SetStatus(Span& span, const grpc::Status& status) {
  if (!span.recording()) return;
  span.SetAttribute("rpc.grpc.status_code", static_cast<int>(status.error_code()));
  if (status.ok()) {
    span.SetStatus(StatusCode::kOk);
  } else {
    span.SetStatus(StatusCode::kError,
                   std::string(GrpcCodeName(status.error_code())) + ": " + status.error_message());
  }
}

}  // namespace

const char* GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

std::vector<double> LatencyBuckets() { return ExponentialBuckets(0.001, 2, 17); }

RpcMetrics& RpcMetrics::Default() {
  static RpcMetrics m = [] {
    Registry& r = Registry::Default();
    RpcMetrics x;
    x.requests =
        &r.AddCounter("hap_requests_total", "gRPC calls served, by method and final status code.",
                      {"rpc", "code"});
    x.duration = &r.AddHistogram(
        "hap_request_duration_seconds",
        "gRPC call latency on the serving side, from the call's arrival to its final status.",
        LatencyBuckets(), {"rpc"});
    return x;
  }();
  return m;
}

ServerRpc::~ServerRpc() {
  if (started_ && !finished_) Finish(grpc::Status(grpc::StatusCode::CANCELLED, "abandoned"));
}

void ServerRpc::Start(const grpc::ServerContextBase& ctx, std::string_view method,
                      const Tracer& tracer) {
  method_ = std::string(method);
  start_ = std::chrono::steady_clock::now();
  started_ = true;
  if (tracer.enabled()) {
    const std::optional<SpanContext> parent = ExtractFromMetadata(ctx);
    span_ = tracer.StartSpan(method, SpanKind::kServer, parent ? *parent : SpanContext());
    SetRpcAttributes(span_, method);
  }
}

void ServerRpc::Finish(const grpc::Status& status) {
  if (!started_ || finished_) return;
  finished_ = true;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  RpcMetrics& m = RpcMetrics::Default();
  m.requests->Labels({method_, GrpcCodeName(status.error_code())}).Inc();
  m.duration->Labels({method_}).Observe(seconds);
  SetStatus(span_, status);
  span_.End();
}

ClientRpc::ClientRpc(const SpanContext& parent, std::string_view method, std::string_view peer,
                     grpc::ClientContext* ctx, const Tracer& tracer) {
  if (!tracer.enabled()) return;
  span_ = tracer.StartSpan(method, SpanKind::kClient, parent);
  SetRpcAttributes(span_, method);
  if (span_.recording()) {
    const size_t colon = peer.rfind(':');
    int port = 0;
    if (colon != std::string_view::npos &&
        absl::SimpleAtoi(std::string(peer.substr(colon + 1)), &port)) {
      span_.SetAttribute("server.address", peer.substr(0, colon));
      span_.SetAttribute("server.port", port);
    } else {
      span_.SetAttribute("server.address", peer);
    }
  }
  InjectIntoMetadata(span_.context(), ctx);
}

void ClientRpc::Finish(const grpc::Status& status) {
  SetStatus(span_, status);
  span_.End();
}

}  // namespace hap::telemetry
