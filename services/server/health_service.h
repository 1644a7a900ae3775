// grpc.health.v1.Health served by the project instead of gRPC's built-in one, whose status is
// SERVING from the moment the server starts (before the model is loaded). This one starts
// NOT_SERVING and only changes when told: Check answers for "" (the whole server) and for each
// registered service name (NOT_FOUND for others, as the protocol says); Watch streams the status
// and every change until the client cancels or the server shuts down. HealthCheckOnly and
// StartHealthCheckServer serve the same answers, Check alone, on a plaintext port of its own for
// probes that cannot speak TLS (the kubelet's gRPC probe).
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace hap::svc {

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  // `services`: the fully qualified names answered besides "" (e.g. "hap.v1.Generation").
  explicit HealthService(std::vector<std::string> services);
  ~HealthService() override;

  // One status for "" and every registered service; watchers get the change.
  void SetServing(bool serving);
  // Ends every Watch stream (call before Server::Shutdown so shutdown does not wait on them).
  void Shutdown();
  // Check's answer for `service`: OK with the status, or NOT_FOUND for a service not hosted.
  grpc::Status Answer(const std::string& service,
                      grpc::health::v1::HealthCheckResponse* response) const;

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* ctx,
      const grpc::health::v1::HealthCheckRequest* request) override;

  class Watcher;

 private:
  grpc::health::v1::HealthCheckResponse::ServingStatus StatusOf(const std::string& service) const;
  void Remove(Watcher* w);

  const std::set<std::string> services_;
  mutable std::mutex mu_;
  bool serving_ = false;
  bool shut_down_ = false;
  std::set<Watcher*> watchers_;
};

// grpc.health.v1.Health/Check answered by `health` (which must outlive it); Watch is left
// UNIMPLEMENTED, so an unauthenticated port serving this holds no stream open.
class HealthCheckOnly final : public grpc::health::v1::Health::CallbackService {
 public:
  explicit HealthCheckOnly(const HealthService* health) : health_(health) {}
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;

 private:
  const HealthService* health_;
};

// A plaintext gRPC server on `address` ("host:port"; port 0 = a free one, written to *port)
// with `service` and nothing else: the server reflection that gRPC adds to every server is taken
// out, and connections are kept small and short (a few streams, tiny messages, closed when idle).
// It tells whether the process is serving, which is all an unauthenticated caller can learn.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartHealthCheckServer(const std::string& address,
                                                                     HealthCheckOnly* service,
                                                                     int* port);

}  // namespace hap::svc
