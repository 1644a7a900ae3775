#include "tests/telemetry/test_collector.h"

#include "telemetry/otlp_encoder.h"

namespace hap::testing {

namespace collector = opentelemetry::proto::collector::trace::v1;

TestCollector::~TestCollector() { Stop(); }

bool TestCollector::Start(bool with_http) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &grpc_port_);
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || grpc_port_ == 0) return false;
  if (with_http) {
    http_ = std::make_unique<telemetry::HttpServer>();
    http_->Handle("/v1/traces", [this](const telemetry::HttpRequest& req) {
      telemetry::HttpResponse r;
      collector::ExportTraceServiceRequest body;
      if (req.method != "POST" || req.headers.count("content-type") == 0 ||
          req.headers.at("content-type") != "application/x-protobuf" ||
          !body.ParseFromString(req.body)) {
        r.status = 400;
        r.body = "expected a protobuf ExportTraceServiceRequest\n";
        return r;
      }
      ++calls_;
      Store(body);
      r.content_type = "application/x-protobuf";
      r.body = collector::ExportTraceServiceResponse().SerializeAsString();
      return r;
    });
    if (!http_->Start("127.0.0.1", 0).ok()) return false;
    http_port_ = http_->port();
  }
  return true;
}

void TestCollector::Stop() {
  SetStalled(false);
  if (http_ != nullptr) http_->Stop();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
    server_.reset();
  }
}

void TestCollector::SetStalled(bool stalled) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stalled_ = stalled;
  }
  cv_.notify_all();
}

grpc::Status TestCollector::Export(grpc::ServerContext* context,
                                   const collector::ExportTraceServiceRequest* request,
                                   collector::ExportTraceServiceResponse* response) {
  ++calls_;
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (stalled_ && !context->IsCancelled()) {
      cv_.wait_for(lock, std::chrono::milliseconds(20));
    }
    if (context->IsCancelled()) return grpc::Status::CANCELLED;
  }
  Store(*request);
  return grpc::Status::OK;
}

void TestCollector::Store(const collector::ExportTraceServiceRequest& req) {
  std::vector<CollectedSpan> got;
  for (const auto& rs : req.resource_spans()) {
    std::string service;
    for (const auto& kv : rs.resource().attributes()) {
      if (kv.key() == "service.name") service = kv.value().string_value();
    }
    for (const auto& ss : rs.scope_spans()) {
      for (const auto& s : ss.spans()) got.push_back({service, telemetry::DecodeSpan(s)});
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& g : got) spans_.push_back(std::move(g));
  }
  cv_.notify_all();
}

std::vector<CollectedSpan> TestCollector::Spans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spans_;
}

bool TestCollector::WaitFor(const std::function<bool(const std::vector<CollectedSpan>&)>& done,
                            std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return done(spans_); });
}

}  // namespace hap::testing
