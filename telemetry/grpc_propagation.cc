#include "telemetry/grpc_propagation.h"

#include <string_view>
#include <vector>

namespace hap::telemetry {

std::optional<SpanContext> ExtractFromMetadata(const grpc::ServerContextBase& ctx) {
  const auto& md = ctx.client_metadata();
  std::vector<std::string_view> parents, states;
  auto [p0, p1] = md.equal_range(kTraceparentKey);
  for (auto it = p0; it != p1; ++it) parents.emplace_back(it->second.data(), it->second.size());
  if (parents.empty()) return std::nullopt;
  auto [s0, s1] = md.equal_range(kTracestateKey);
  for (auto it = s0; it != s1; ++it) states.emplace_back(it->second.data(), it->second.size());
  return ExtractContext(parents, states);
}

void InjectIntoMetadata(const SpanContext& context, grpc::ClientContext* ctx) {
  if (!context.valid()) return;
  ctx->AddMetadata(kTraceparentKey, FormatTraceparent(context));
  if (!context.trace_state.empty()) ctx->AddMetadata(kTracestateKey, context.trace_state);
}

}  // namespace hap::telemetry
