#include "services/common/debug_service.h"

namespace hap::svc {

grpc::ServerUnaryReactor* DebugService::GetState(grpc::CallbackServerContext* ctx,
                                                 const hap::v1::GetStateRequest* request,
                                                 hap::v1::ServerState* response) {
  *response = state_->Snapshot();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace hap::svc
