// Spans: a recorded operation (name, kind, times, attributes, events, status) inside a trace.
// A Span is a move-only handle; it is "recording" only when its trace is sampled by an enabled
// tracer, and every setter on a non-recording span returns at once without allocating, so
// instrumented code costs a branch per call when tracing is off.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "telemetry/trace_context.h"

namespace hap::telemetry {

enum class SpanKind : int { kInternal = 1, kServer = 2, kClient = 3, kProducer = 4, kConsumer = 5 };
enum class StatusCode : int { kUnset = 0, kOk = 1, kError = 2 };

using AttributeValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>,
                                    std::vector<double>, std::vector<std::string>>;
struct Attribute {
  std::string key;
  AttributeValue value;
};
using Attributes = std::vector<Attribute>;

struct SpanEvent {
  uint64_t time_unix_ns = 0;
  std::string name;
  Attributes attributes;
};

// Per-span limits (the OpenTelemetry SDK defaults); what is over them is counted as dropped.
inline constexpr size_t kMaxAttributes = 128;
inline constexpr size_t kMaxEvents = 128;

// Everything a finished span carries to the exporter.
struct SpanData {
  SpanContext context;
  SpanId parent_span_id;  // all zero for a root span
  bool parent_remote = false;
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  uint64_t start_unix_ns = 0;
  uint64_t end_unix_ns = 0;
  Attributes attributes;
  std::vector<SpanEvent> events;
  StatusCode status = StatusCode::kUnset;
  std::string status_message;
  uint32_t dropped_attributes = 0;
  uint32_t dropped_events = 0;

  const AttributeValue* Find(std::string_view key) const;  // nullptr when absent
};

// Receives spans as they end (the batching exporter). Must not block.
class SpanProcessor {
 public:
  virtual ~SpanProcessor() = default;
  virtual void OnEnd(std::unique_ptr<SpanData> span) = 0;
};

uint64_t NowUnixNanos();
// A steady-clock time point as Unix nanoseconds, for spans whose times were measured with the
// steady clock (exact for differences, offset by the two clocks' skew at the time of the call).
uint64_t ToUnixNanos(std::chrono::steady_clock::time_point t);

// Attribute values from the usual C++ types (integers → int64, floating point → double, strings,
// and vectors of those).
inline AttributeValue ToAttributeValue(bool v) { return v; }
inline AttributeValue ToAttributeValue(const char* v) { return std::string(v); }
inline AttributeValue ToAttributeValue(std::string_view v) { return std::string(v); }
inline AttributeValue ToAttributeValue(const std::string& v) { return v; }
template <class T, std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, int> = 0>
AttributeValue ToAttributeValue(T v) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<int64_t>(v);
  } else {
    return static_cast<double>(v);
  }
}
template <class T>
AttributeValue ToAttributeValue(const std::vector<T>& v) {
  if constexpr (std::is_integral_v<T>) {
    return std::vector<int64_t>(v.begin(), v.end());
  } else if constexpr (std::is_floating_point_v<T>) {
    return std::vector<double>(v.begin(), v.end());
  } else {
    return std::vector<std::string>(v.begin(), v.end());
  }
}

class Span {
 public:
  Span() = default;  // invalid context, not recording
  // A span that propagates `context` but records nothing (unsampled), or records into `data`.
  Span(SpanContext context, std::unique_ptr<SpanData> data, SpanProcessor* processor);
  Span(Span&& other) noexcept;
  Span& operator=(Span&& other) noexcept;  // ends the span it held
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span() { End(); }

  bool recording() const { return data_ != nullptr; }
  // Valid whenever tracing is on, sampled or not: children and peers continue the trace.
  const SpanContext& context() const { return context_; }

  template <class T>
  Span& SetAttribute(std::string_view key, const T& value) {
    if (data_ != nullptr) SetAttributeValue(key, ToAttributeValue(value));
    return *this;
  }
  Span& SetAttributeValue(std::string_view key, AttributeValue value);
  void AddEvent(std::string_view name, Attributes attributes = {});
  void AddEventAt(std::string_view name, uint64_t time_unix_ns, Attributes attributes = {});
  // kError with a message, or kOk (which clears any message). A span ending without a status
  // is reported as unset, which backends read as success.
  void SetStatus(StatusCode code, std::string_view message = "");
  void SetStartTime(uint64_t start_unix_ns);

  // Hands the span to the exporter (idempotent; the destructor calls it).
  void End() { End(0); }
  void End(uint64_t end_unix_ns);  // 0 = now

 private:
  SpanContext context_;
  std::unique_ptr<SpanData> data_;
  SpanProcessor* processor_ = nullptr;
};

}  // namespace hap::telemetry
