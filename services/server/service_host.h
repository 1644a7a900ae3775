// The skeleton every service binary shares (STYLE §6): a gRPC server with the health service
// (NOT_SERVING until the model is loaded and again while draining), server reflection and the
// Debug service; SIGTERM/SIGINT → drain in-flight requests → Shutdown(deadline) → exit 0. It also
// runs the process's telemetry: tracing (OTLP export, off unless configured) and, with
// --metrics-port, Prometheus /metrics over HTTP.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "services/auth/token_auth.h"
#include "services/server/health_service.h"
#include "services/server/options.h"
#include "services/server/server_state.h"
#include "telemetry/http_server.h"
#include "telemetry/tracing.h"

namespace hap::svc {

class ServiceHost {
 public:
  // Call first thing in main(): installs the SIGTERM/SIGINT handlers that start the drain.
  explicit ServiceHost(std::string name);
  ~ServiceHost();

  const std::string& name() const { return name_; }
  ServerState& state() { return state_; }

  // The start of every service's main(): parses argv against `specs` (flags over HAP_*
  // environment over defaults) into `*options` and reads the common options into `*common`.
  // Returns -1 to go on, or the exit code to end with now: 0 after printing the usage for
  // --help, StartupFailure's code (with the error on stderr) for a bad flag or value.
  int ParseArgs(int argc, char** argv, const std::vector<OptionSpec>& specs, Options* options,
                CommonOptions* common);

  // Starts tracing (as configured by the OTEL_* environment and the telemetry flags; a bad value
  // is InvalidArgument) and the /metrics server ("<name> metrics on HOST:PORT" on stdout), then
  // listens on options.host:options.port (0 = a free port) with `services` plus health,
  // reflection and Debug, reports NOT_SERVING, and prints "<name> listening on HOST:PORT" on
  // stdout. `max_receive_bytes` bounds incoming messages. With options.health_port, a second,
  // plaintext server answers health checks alone there ("<name> health checks on HOST:PORT").
  absl::Status Start(const CommonOptions& options, const std::vector<grpc::Service*>& services,
                     int max_receive_bytes);
  int port() const { return port_; }
  // Before Start(): hap.v1.Debug then needs a bearer token `auth` accepts (the front door with
  // authentication on). Health and reflection stay open: probes and tools need them.
  void RequireTokenForDebug(const TokenAuth* auth) { debug_auth_ = auth; }
  // A channel to this process's own server (after Start), for an in-process front end.
  std::shared_ptr<grpc::Channel> InProcessChannel();

  // The model is loaded: health reports SERVING and requests are accepted.
  void SetServing();

  // Blocks until SIGTERM/SIGINT (or Stop()), then drains: health NOT_SERVING, new requests get
  // UNAVAILABLE, in-flight requests get up to drain_timeout_ms to finish, then Shutdown with a
  // short deadline cancels whatever is left; spans still queued get up to 2 s to be exported.
  // Returns the process exit code (0).
  int WaitAndDrain(int64_t drain_timeout_ms);
  void Stop();

  // A startup step after Start() failed: stops the server at once, prints the error, returns
  // the exit code. Call it before the services it serves are destroyed.
  int Fail(const absl::Status& status);

 private:
  void SetHealth(bool serving);
  void StopHealthServer();
  absl::Status StartTelemetry(const CommonOptions& options);
  void StopTelemetry();

  const std::string name_;
  ServerState state_;
  std::unique_ptr<grpc::Service> debug_service_;
  const TokenAuth* debug_auth_ = nullptr;
  std::unique_ptr<HealthService> health_;  // declared before server_: outlives it
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  // --health-port: Check alone, in plaintext (after health_, which answers it).
  std::unique_ptr<HealthCheckOnly> health_check_;
  std::unique_ptr<grpc::Server> health_server_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_requested_ = false;
  std::unique_ptr<telemetry::Tracing> tracing_;
  std::unique_ptr<telemetry::HttpServer> metrics_server_;
};

// A service's whole main(): makes the host `name`, parses argv against `specs` (ParseArgs) and,
// unless that ends the process (--help, a bad flag), runs `serve`. Returns the exit code.
int RunService(const std::string& name, int argc, char** argv, const std::vector<OptionSpec>& specs,
               const std::function<int(ServiceHost& host, const Options& options,
                                       const CommonOptions& common)>& serve);

// "<program>: <message>" on stderr; the exit code for a startup error (2 for bad flags).
int StartupFailure(const std::string& program, const absl::Status& status);

}  // namespace hap::svc
