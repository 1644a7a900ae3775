// grpc.health.v1.Health served by the project instead of gRPC's built-in one, whose status is
// SERVING from the moment the server starts (before the model is loaded). This one starts
// NOT_SERVING and only changes when told: Check answers for "" (the whole server) and for each
// registered service name (NOT_FOUND for others, as the protocol says); Watch streams the status
// and every change until the client cancels or the server shuts down.
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"

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

}  // namespace hap::svc
