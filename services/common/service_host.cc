#include "services/common/service_host.h"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "runtime/common/status_macros.h"
#include "sdk/stop_signals.h"
#include "services/common/debug_service.h"

namespace hap::svc {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read '", path, "'"));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
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
  sdk::StopSignals::Install();
  // Detached: it waits for a stop signal for the life of the process.
  std::thread([this] {
    while (!sdk::StopSignals::Wait(std::chrono::hours(24))) {
    }
    std::fprintf(stderr, "%s: received %s, draining\n", name_.c_str(),
                 sdk::StopSignals::received() == SIGTERM ? "SIGTERM" : "SIGINT");
    Stop();
  }).detach();
}

ServiceHost::~ServiceHost() {
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
}

int ServiceHost::Fail(const absl::Status& status) {
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    server_.reset();
  }
  return StartupFailure(name_, status);
}

absl::Status ServiceHost::Start(const CommonOptions& options,
                                const std::vector<grpc::Service*>& services,
                                int max_receive_bytes) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  debug_service_ = std::make_unique<DebugService>(&state_);
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options.host, ":", options.port);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = ServerCredentials(options);
  if (!creds.ok()) return creds.status();
  builder.AddListeningPort(address, *creds, &port_);
  builder.SetMaxReceiveMessageSize(max_receive_bytes);
  // Outgoing chunks are sized by the codecs; the limit guards what comes in.
  builder.SetMaxSendMessageSize(-1);
  for (grpc::Service* s : services) builder.RegisterService(s);
  builder.RegisterService(debug_service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  SetHealth(false);
  std::printf("%s listening on %s:%d\n", name_.c_str(), options.host.c_str(), port_);
  std::fflush(stdout);
  return absl::OkStatus();
}

void ServiceHost::SetHealth(bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(serving);  // every registered service, and ""
}

void ServiceHost::SetServing() {
  state_.SetReady();
  if (!state_.draining()) SetHealth(true);
  std::printf("%s serving\n", name_.c_str());
  std::fflush(stdout);
}

void ServiceHost::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_requested_ = true;
  }
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
  // Cancels whatever is left after a short grace period.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  server_.reset();
  std::fprintf(stderr, "%s: stopped\n", name_.c_str());
  return 0;
}

int StartupFailure(const std::string& program, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace hap::svc
