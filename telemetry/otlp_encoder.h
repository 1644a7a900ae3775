// Finished spans → an OTLP ExportTraceServiceRequest (the body of both the gRPC Export call and
// an OTLP/HTTP protobuf POST): one ResourceSpans for this process, one ScopeSpans for HAP serve.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"
#include "telemetry/exporter.h"

namespace hap::telemetry {

// service.name and the other resource attributes of this process.
struct Resource {
  std::vector<std::pair<std::string, std::string>> attributes;
  // service.name = `service_name`, telemetry.sdk.*, process.pid, host.name, then `extra`
  // (from OTEL_RESOURCE_ATTRIBUTES; a key given there replaces the built-in one).
  static Resource ForService(const std::string& service_name,
                             const std::vector<std::pair<std::string, std::string>>& extra = {});
};

inline constexpr char kScopeName[] = "hap.serve";
inline constexpr char kScopeVersion[] = "0.1.0";

void EncodeAttribute(const Attribute& attribute, opentelemetry::proto::common::v1::KeyValue* out);
void EncodeSpan(const SpanData& span, opentelemetry::proto::trace::v1::Span* out);
opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest EncodeRequest(
    const Resource& resource, const SpanBatch& batch);

// The reverse, for tests and the test collector.
SpanData DecodeSpan(const opentelemetry::proto::trace::v1::Span& span);

}  // namespace hap::telemetry
