#include "telemetry/otlp_encoder.h"

#include <unistd.h>

#include <cstring>

namespace hap::telemetry {
namespace {

namespace common = opentelemetry::proto::common::v1;
namespace trace = opentelemetry::proto::trace::v1;

// OTLP Span.flags bits above the W3C flags: "is_remote is known" and "parent is remote".
constexpr uint32_t kHasIsRemote = 0x100;
constexpr uint32_t kIsRemote = 0x200;

void EncodeValue(const AttributeValue& value, common::AnyValue* out) {
  struct Visitor {
    common::AnyValue* out;
    void operator()(bool v) const { out->set_bool_value(v); }
    void operator()(int64_t v) const { out->set_int_value(v); }
    void operator()(double v) const { out->set_double_value(v); }
    void operator()(const std::string& v) const { out->set_string_value(v); }
    void operator()(const std::vector<int64_t>& v) const {
      common::ArrayValue* a = out->mutable_array_value();
      for (int64_t x : v) a->add_values()->set_int_value(x);
    }
    void operator()(const std::vector<double>& v) const {
      common::ArrayValue* a = out->mutable_array_value();
      for (double x : v) a->add_values()->set_double_value(x);
    }
    void operator()(const std::vector<std::string>& v) const {
      common::ArrayValue* a = out->mutable_array_value();
      for (const std::string& x : v) a->add_values()->set_string_value(x);
    }
  };
  std::visit(Visitor{out}, value);
}

AttributeValue DecodeValue(const common::AnyValue& v) {
  switch (v.value_case()) {
    case common::AnyValue::kBoolValue:
      return v.bool_value();
    case common::AnyValue::kIntValue:
      return v.int_value();
    case common::AnyValue::kDoubleValue:
      return v.double_value();
    case common::AnyValue::kStringValue:
      return v.string_value();
    case common::AnyValue::kArrayValue: {
      const common::ArrayValue& a = v.array_value();
      if (a.values_size() > 0 && a.values(0).has_int_value()) {
        std::vector<int64_t> out;
        for (const auto& x : a.values()) out.push_back(x.int_value());
        return out;
      }
      if (a.values_size() > 0 && a.values(0).has_double_value()) {
        std::vector<double> out;
        for (const auto& x : a.values()) out.push_back(x.double_value());
        return out;
      }
      std::vector<std::string> out;
      for (const auto& x : a.values()) out.push_back(x.string_value());
      return out;
    }
    default:
      return std::string();
  }
}

void AddStringAttribute(const std::string& key, const std::string& value,
                        google::protobuf::RepeatedPtrField<common::KeyValue>* out) {
  common::KeyValue* kv = out->Add();
  kv->set_key(key);
  kv->mutable_value()->set_string_value(value);
}

}  // namespace

Resource Resource::ForService(const std::string& service_name,
                              const std::vector<std::pair<std::string, std::string>>& extra) {
  Resource r;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  r.attributes = {{"service.name", service_name},
                  {"service.namespace", "hap"},
                  {"telemetry.sdk.name", "hap-telemetry"},
                  {"telemetry.sdk.language", "cpp"},
                  {"telemetry.sdk.version", kScopeVersion},
                  {"process.pid", std::to_string(getpid())},
                  {"host.name", host}};
  for (const auto& [key, value] : extra) {
    bool replaced = false;
    for (auto& a : r.attributes) {
      if (a.first == key) {
        a.second = value;
        replaced = true;
      }
    }
    if (!replaced) r.attributes.emplace_back(key, value);
  }
  return r;
}

void EncodeAttribute(const Attribute& attribute, common::KeyValue* out) {
  out->set_key(attribute.key);
  EncodeValue(attribute.value, out->mutable_value());
}

void EncodeSpan(const SpanData& s, trace::Span* out) {
  out->set_trace_id(s.context.trace_id.bytes.data(), s.context.trace_id.bytes.size());
  out->set_span_id(s.context.span_id.bytes.data(), s.context.span_id.bytes.size());
  if (!s.context.trace_state.empty()) out->set_trace_state(s.context.trace_state);
  if (s.parent_span_id.valid()) {
    out->set_parent_span_id(s.parent_span_id.bytes.data(), s.parent_span_id.bytes.size());
  }
  out->set_flags(s.context.flags | kHasIsRemote | (s.parent_remote ? kIsRemote : 0));
  out->set_name(s.name);
  out->set_kind(static_cast<trace::Span::SpanKind>(static_cast<int>(s.kind)));
  out->set_start_time_unix_nano(s.start_unix_ns);
  out->set_end_time_unix_nano(s.end_unix_ns);
  for (const Attribute& a : s.attributes) EncodeAttribute(a, out->add_attributes());
  out->set_dropped_attributes_count(s.dropped_attributes);
  for (const SpanEvent& e : s.events) {
    trace::Span::Event* pe = out->add_events();
    pe->set_time_unix_nano(e.time_unix_ns);
    pe->set_name(e.name);
    for (const Attribute& a : e.attributes) EncodeAttribute(a, pe->add_attributes());
  }
  out->set_dropped_events_count(s.dropped_events);
  if (s.status != StatusCode::kUnset) {
    trace::Status* st = out->mutable_status();
    st->set_code(static_cast<trace::Status::StatusCode>(static_cast<int>(s.status)));
    if (!s.status_message.empty()) st->set_message(s.status_message);
  }
}

opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest EncodeRequest(
    const Resource& resource, const SpanBatch& batch) {
  opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest req;
  trace::ResourceSpans* rs = req.add_resource_spans();
  for (const auto& [key, value] : resource.attributes) {
    AddStringAttribute(key, value, rs->mutable_resource()->mutable_attributes());
  }
  trace::ScopeSpans* ss = rs->add_scope_spans();
  ss->mutable_scope()->set_name(kScopeName);
  ss->mutable_scope()->set_version(kScopeVersion);
  ss->mutable_spans()->Reserve(static_cast<int>(batch.size()));
  for (const auto& s : batch) EncodeSpan(*s, ss->add_spans());
  return req;
}

SpanData DecodeSpan(const trace::Span& p) {
  SpanData s;
  if (p.trace_id().size() == 16)
    std::memcpy(s.context.trace_id.bytes.data(), p.trace_id().data(), 16);
  if (p.span_id().size() == 8) std::memcpy(s.context.span_id.bytes.data(), p.span_id().data(), 8);
  if (p.parent_span_id().size() == 8) {
    std::memcpy(s.parent_span_id.bytes.data(), p.parent_span_id().data(), 8);
  }
  s.context.trace_state = p.trace_state();
  s.context.flags = static_cast<uint8_t>(p.flags() & 0xff);
  s.parent_remote = (p.flags() & kIsRemote) != 0;
  s.name = p.name();
  s.kind = static_cast<SpanKind>(static_cast<int>(p.kind()));
  s.start_unix_ns = p.start_time_unix_nano();
  s.end_unix_ns = p.end_time_unix_nano();
  for (const common::KeyValue& kv : p.attributes()) {
    s.attributes.push_back({kv.key(), DecodeValue(kv.value())});
  }
  for (const trace::Span::Event& e : p.events()) {
    SpanEvent ev;
    ev.time_unix_ns = e.time_unix_nano();
    ev.name = e.name();
    for (const common::KeyValue& kv : e.attributes()) {
      ev.attributes.push_back({kv.key(), DecodeValue(kv.value())});
    }
    s.events.push_back(std::move(ev));
  }
  s.dropped_attributes = p.dropped_attributes_count();
  s.dropped_events = p.dropped_events_count();
  if (p.has_status()) {
    s.status = static_cast<StatusCode>(static_cast<int>(p.status().code()));
    s.status_message = p.status().message();
  }
  return s;
}

}  // namespace hap::telemetry
