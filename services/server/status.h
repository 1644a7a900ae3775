// absl::Status inside the services, grpc::Status only at the RPC boundary (STYLE §5). The two
// share canonical code numbers, so conversion keeps the code and the message.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace hap::svc {

grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

// The same code with "context: " before the message (OK stays OK).
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace hap::svc
