// W3C trace context in gRPC metadata: the `traceparent` / `tracestate` keys, read from an
// incoming call and written onto an outgoing one.
#pragma once

#include <optional>

#include "grpcpp/grpcpp.h"
#include "telemetry/trace_context.h"

namespace hap::telemetry {

inline constexpr char kTraceparentKey[] = "traceparent";
inline constexpr char kTracestateKey[] = "tracestate";

// The caller's context when its metadata holds exactly one valid traceparent (plus a valid
// tracestate, if any); nullopt otherwise, and the server starts a new trace.
std::optional<SpanContext> ExtractFromMetadata(const grpc::ServerContextBase& ctx);

// Adds traceparent (and tracestate when set) for `context`; nothing for an invalid context
// (tracing off).
void InjectIntoMetadata(const SpanContext& context, grpc::ClientContext* ctx);

}  // namespace hap::telemetry
