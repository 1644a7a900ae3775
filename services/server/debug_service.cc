#include "services/server/debug_service.h"

#include "services/server/status.h"

namespace hap::svc {

grpc::ServerUnaryReactor* DebugService::GetState(grpc::CallbackServerContext* ctx,
                                                 const hap::v1::GetStateRequest* request,
                                                 hap::v1::ServerState* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (auth_ != nullptr) {
    if (absl::StatusOr<std::string> client = auth_->Authenticate(*ctx); !client.ok()) {
      reactor->Finish(ToGrpc(client.status()));
      return reactor;
    }
  }
  *response = state_->Snapshot();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace hap::svc
