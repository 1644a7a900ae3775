// hap.v1.Debug: reports a service's ServerState (requests in flight, KV caches and leases). Open
// on the internal services; on a front door with authentication it needs a bearer token too.
#pragma once

#include "hap/v1/debug.grpc.pb.h"
#include "services/auth/token_auth.h"
#include "services/server/server_state.h"

namespace hap::svc {

class DebugService final : public hap::v1::Debug::CallbackService {
 public:
  // `auth` null = open.
  explicit DebugService(const ServerState* state, const TokenAuth* auth = nullptr)
      : state_(state), auth_(auth) {}
  grpc::ServerUnaryReactor* GetState(grpc::CallbackServerContext* ctx,
                                     const hap::v1::GetStateRequest* request,
                                     hap::v1::ServerState* response) override;

 private:
  const ServerState* state_;
  const TokenAuth* auth_;
};

}  // namespace hap::svc
