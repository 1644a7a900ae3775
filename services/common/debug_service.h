// hap.v1.Debug: reports a service's ServerState (requests in flight, KV caches and leases).
#pragma once

#include "hap/v1/debug.grpc.pb.h"
#include "services/common/server_state.h"

namespace hap::svc {

class DebugService final : public hap::v1::Debug::CallbackService {
 public:
  explicit DebugService(const ServerState* state) : state_(state) {}
  grpc::ServerUnaryReactor* GetState(grpc::CallbackServerContext* ctx,
                                     const hap::v1::GetStateRequest* request,
                                     hap::v1::ServerState* response) override;

 private:
  const ServerState* state_;
};

}  // namespace hap::svc
