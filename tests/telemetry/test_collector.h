// An OTLP collector for tests: a gRPC TraceService server on 127.0.0.1:0 and, optionally, an
// OTLP/HTTP endpoint (POST /v1/traces) on the project's HttpServer. It keeps every span it
// receives with the service.name of its resource, and can be stalled (Export blocks until
// released or cancelled) to test that a hung collector costs requests nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.grpc.pb.h"
#include "telemetry/http_server.h"
#include "telemetry/span.h"

namespace hap::testing {

struct CollectedSpan {
  std::string service;  // resource service.name
  telemetry::SpanData span;
};

class TestCollector final
    : public opentelemetry::proto::collector::trace::v1::TraceService::Service {
 public:
  TestCollector() = default;
  ~TestCollector() override;

  // Starts the gRPC server (and the HTTP endpoint when `with_http`).
  bool Start(bool with_http = false);
  void Stop();
  std::string grpc_address() const { return "127.0.0.1:" + std::to_string(grpc_port_); }
  std::string http_base_url() const { return "http://127.0.0.1:" + std::to_string(http_port_); }

  // While stalled, Export calls block until un-stalled or cancelled by the client.
  void SetStalled(bool stalled);

  std::vector<CollectedSpan> Spans() const;
  int export_calls() const { return calls_.load(); }
  // Waits until `done(spans)` holds; false at the timeout.
  bool WaitFor(const std::function<bool(const std::vector<CollectedSpan>&)>& done,
               std::chrono::milliseconds timeout) const;

  grpc::Status Export(
      grpc::ServerContext* context,
      const opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest* request,
      opentelemetry::proto::collector::trace::v1::ExportTraceServiceResponse* response) override;

 private:
  void Store(const opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest& req);

  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<telemetry::HttpServer> http_;
  int grpc_port_ = 0, http_port_ = 0;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<CollectedSpan> spans_;
  bool stalled_ = false;
  std::atomic<int> calls_{0};
};

}  // namespace hap::testing
