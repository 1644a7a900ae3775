#include "services/server/service_host.h"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/stop_signals.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "hap/v1/debug.grpc.pb.h"
#include "hap/v1/decode.grpc.pb.h"
#include "hap/v1/encoder.grpc.pb.h"
#include "hap/v1/generate.grpc.pb.h"
#include "services/server/debug_service.h"
#include "telemetry/metrics.h"
#include "telemetry/rpc.h"

namespace hap::svc {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFileToString(path);
  if (!pem.ok()) {
    return absl::Status(pem.status().code(),
                        absl::StrCat("cannot read a TLS file: ", pem.status().message()));
  }
  return pem;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const CommonOptions& options) {
  if (options.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  HAP_ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(options.tls_cert_file));
  HAP_ASSIGN_OR_RETURN(pair.private_key, ReadPem(options.tls_key_file));
  ssl.pem_key_cert_pairs.push_back(pair);
  if (!options.tls_client_ca_file.empty()) {
    HAP_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(options.tls_client_ca_file));
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

ServiceHost::ServiceHost(std::string name) : name_(std::move(name)), state_(name_) {
  StopSignals::Install();
  // Detached: it waits for a stop signal for the life of the process.
  std::thread([this] {
    while (!StopSignals::Wait(std::chrono::hours(24))) {
    }
    std::fprintf(stderr, "%s: received %s, draining\n", name_.c_str(),
                 StopSignals::received() == SIGTERM ? "SIGTERM" : "SIGINT");
    Stop();
  }).detach();
}

ServiceHost::~ServiceHost() {
  if (health_ != nullptr) health_->Shutdown();
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  if (health_server_ != nullptr) health_server_->Shutdown(std::chrono::system_clock::now());
  StopTelemetry();
}

absl::Status ServiceHost::StartTelemetry(const CommonOptions& options) {
  HAP_ASSIGN_OR_RETURN(telemetry::TracingConfig config, telemetry::TracingConfigFromEnv(name_));
  if (!options.otlp_endpoint.empty()) {
    config.endpoint = options.otlp_endpoint;
    config.endpoint_is_signal_url = false;
  }
  if (!options.otlp_protocol.empty()) config.protocol = options.otlp_protocol;
  if (!options.service_name.empty()) config.service_name = options.service_name;
  if (!options.traces_sampler.empty()) config.sampler = options.traces_sampler;
  if (!options.traces_sampler_arg.empty()) config.sampler_arg = options.traces_sampler_arg;
  absl::StatusOr<std::unique_ptr<telemetry::Tracing>> tracing = telemetry::Tracing::Start(config);
  if (!tracing.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tracing: ", tracing.status().message()));
  }
  tracing_ = std::move(*tracing);
  std::fprintf(stderr, "%s: %s\n", name_.c_str(), tracing_->Describe().c_str());

  // What the process holds, read at each scrape.
  telemetry::Registry& r = telemetry::Registry::Default();
  telemetry::RpcMetrics::Default();  // the request families exist before the first request
  r.AddCallbackGauge("hap_requests_in_flight",
                     "Requests admitted and not finished (running + queued).",
                     [this] { return state_.Snapshot().in_flight_requests(); });
  r.AddCallbackGauge("hap_requests_queued", "Requests admitted and waiting for a worker.",
                     [this] { return state_.Snapshot().queued_requests(); });
  r.AddCallbackCounter("hap_requests_rejected_total",
                       "Requests refused at admission (--max-concurrent + --queue-length taken).",
                       [this] { return state_.Snapshot().requests_rejected(); });
  r.AddCallbackGauge("hap_kv_leases_held", "KV caches waiting on a transfer (lease running).",
                     [this] { return state_.Snapshot().kv_leases(); });
  r.AddCallbackGauge("hap_kv_caches_held", "KV caches alive in this process.",
                     [this] { return state_.Snapshot().kv_caches_held(); });
  r.AddCallbackGauge("hap_kv_bytes_held", "K/V bytes of the caches alive in this process.",
                     [this] { return state_.Snapshot().kv_bytes_held(); });
  r.AddCallbackCounter("hap_kv_leases_expired_total",
                       "KV transfers abandoned because their lease ran out.",
                       [this] { return state_.Snapshot().leases_expired(); });
  telemetry::Tracing* t = tracing_.get();
  r.AddCallbackCounter("hap_trace_spans_exported_total", "Spans the OTLP collector accepted.",
                       [t] { return t->stats().spans_exported; });
  r.AddCallbackCounter("hap_trace_spans_dropped_total",
                       "Spans dropped: exporter queue full, failed export, or left at shutdown.",
                       [t] { return t->stats().dropped(); });
  r.AddCallbackCounter("hap_trace_export_failures_total", "OTLP export calls that failed.",
                       [t] { return t->stats().export_failures; });
  r.AddCallbackGauge("hap_trace_queue_spans", "Spans waiting in the exporter queue.",
                     [t] { return t->stats().queue_size; });

  if (options.metrics_port < 0) return absl::OkStatus();
  metrics_server_ = std::make_unique<telemetry::HttpServer>();
  metrics_server_->Handle("/metrics", [](const telemetry::HttpRequest&) {
    telemetry::HttpResponse resp;
    resp.content_type = telemetry::kPrometheusContentType;
    resp.body = telemetry::Registry::Default().Render();
    return resp;
  });
  HAP_RETURN_IF_ERROR(metrics_server_->Start(options.host, options.metrics_port));
  std::printf("%s metrics on %s:%d\n", name_.c_str(), options.host.c_str(),
              metrics_server_->port());
  std::fflush(stdout);
  return absl::OkStatus();
}

void ServiceHost::StopTelemetry() {
  if (metrics_server_ != nullptr) metrics_server_->Stop();
  // Spans still queued get a moment to leave; a dead or stalled collector cannot hold the exit.
  if (tracing_ != nullptr) tracing_->Shutdown(std::chrono::seconds(2));
}

int ServiceHost::Fail(const absl::Status& status) {
  if (health_ != nullptr) health_->Shutdown();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    server_.reset();
  }
  StopHealthServer();
  return StartupFailure(name_, status);
}

int ServiceHost::ParseArgs(int argc, char** argv, const std::vector<OptionSpec>& specs,
                           Options* options, CommonOptions* common) {
  absl::StatusOr<Options> parsed =
      Options::Parse(std::vector<std::string>(argv + 1, argv + argc), specs);
  if (!parsed.ok()) return StartupFailure(name_, parsed.status());
  if (parsed->help()) {
    std::printf("%s", Options::Usage(name_, specs).c_str());
    return 0;
  }
  absl::StatusOr<CommonOptions> read = ReadCommonOptions(*parsed);
  if (!read.ok()) return StartupFailure(name_, read.status());
  *options = std::move(*parsed);
  *common = std::move(*read);
  return -1;
}

int RunService(const std::string& name, int argc, char** argv, const std::vector<OptionSpec>& specs,
               const std::function<int(ServiceHost& host, const Options& options,
                                       const CommonOptions& common)>& serve) {
  ServiceHost host(name);
  Options options;
  CommonOptions common;
  if (int exit_code = host.ParseArgs(argc, argv, specs, &options, &common); exit_code >= 0) {
    return exit_code;
  }
  return serve(host, options, common);
}

absl::Status ServiceHost::Start(const CommonOptions& options,
                                const std::vector<grpc::Service*>& services,
                                int max_receive_bytes) {
  HAP_RETURN_IF_ERROR(StartTelemetry(options));
  // The project's health service, not gRPC's built-in one: that one says SERVING from
  // BuildAndStart on, before the model is loaded.
  grpc::EnableDefaultHealthCheckService(false);
  std::vector<std::string> hosted = {hap::v1::Debug::service_full_name()};
  if (name_ == "hap-encoder") hosted.push_back(hap::v1::Encoder::service_full_name());
  if (name_ == "hap-prefill") hosted.push_back(hap::v1::Generation::service_full_name());
  if (name_ == "hap-decode") hosted.push_back(hap::v1::Decode::service_full_name());
  health_ = std::make_unique<HealthService>(std::move(hosted));
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  debug_service_ = std::make_unique<DebugService>(&state_, debug_auth_);
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options.host, ":", options.port);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = ServerCredentials(options);
  if (!creds.ok()) return creds.status();
  builder.AddListeningPort(address, *creds, &port_);
  builder.SetMaxReceiveMessageSize(max_receive_bytes);
  // Connections are closed (GOAWAY, in-flight calls finish) after 5 minutes, so clients
  // resolve a peer's name again: replicas added behind a headless Service then receive calls.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, 5 * 60 * 1000);
  // Outgoing chunks are sized by the codecs; the limit guards what comes in.
  builder.SetMaxSendMessageSize(-1);
  for (grpc::Service* s : services) builder.RegisterService(s);
  builder.RegisterService(debug_service_.get());
  builder.RegisterService(health_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  SetHealth(false);
  std::printf("%s listening on %s:%d\n", name_.c_str(), options.host.c_str(), port_);
  std::fflush(stdout);
  if (options.health_port >= 0) {
    health_check_ = std::make_unique<HealthCheckOnly>(health_.get());
    int health_port = 0;
    HAP_ASSIGN_OR_RETURN(
        health_server_, StartHealthCheckServer(absl::StrCat(options.host, ":", options.health_port),
                                               health_check_.get(), &health_port));
    std::printf("%s health checks on %s:%d (plaintext, grpc.health.v1 Check only)\n", name_.c_str(),
                options.host.c_str(), health_port);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

void ServiceHost::StopHealthServer() {
  if (health_server_ == nullptr) return;
  health_server_->Shutdown(std::chrono::system_clock::now());
  health_server_->Wait();
  health_server_.reset();
}

std::shared_ptr<grpc::Channel> ServiceHost::InProcessChannel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  return server_->InProcessChannel(args);
}

void ServiceHost::SetHealth(bool serving) {
  if (health_ != nullptr) health_->SetServing(serving);  // every hosted service, and ""
}

void ServiceHost::SetServing() {
  state_.SetReady();
  if (!state_.draining()) SetHealth(true);
  std::printf("%s serving\n", name_.c_str());
  std::fflush(stdout);
}

void ServiceHost::Stop() {
  // Notified under the lock: WaitAndDrain may return and the host be destroyed as soon as the
  // flag is seen, so this (detached) thread must be done with cv_ by then.
  std::lock_guard<std::mutex> lock(mu_);
  stop_requested_ = true;
  cv_.notify_all();
}

int ServiceHost::WaitAndDrain(int64_t drain_timeout_ms) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_requested_; });
  }
  state_.SetDraining();
  SetHealth(false);
  const auto t0 = std::chrono::steady_clock::now();
  const bool idle = state_.WaitIdle(t0 + std::chrono::milliseconds(drain_timeout_ms));
  std::fprintf(stderr, "%s: %s; shutting down\n", name_.c_str(),
               idle ? "in-flight requests finished"
                    : absl::StrCat(state_.in_flight(), " requests still in flight after ",
                                   drain_timeout_ms, " ms")
                          .c_str());
  // Cancels whatever is left after a short grace period; health watches end first.
  health_->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  server_.reset();
  StopHealthServer();
  StopTelemetry();
  std::fprintf(stderr, "%s: stopped\n", name_.c_str());
  return 0;
}

int StartupFailure(const std::string& program, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace hap::svc
