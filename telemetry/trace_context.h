// Trace and span ids and the W3C Trace Context headers (traceparent, tracestate) that carry them
// between processes. Parsing follows the W3C rules: anything malformed is rejected, and the
// caller then starts a new trace instead of continuing a broken one.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hap::telemetry {

struct TraceId {
  std::array<uint8_t, 16> bytes{};
  bool valid() const;       // not all zero
  std::string Hex() const;  // 32 lowercase hex digits
  // The low 64 bits (bytes 8..15, big-endian): what the ratio sampler compares.
  uint64_t Low64() const;
  friend bool operator==(const TraceId& a, const TraceId& b) { return a.bytes == b.bytes; }
  friend bool operator!=(const TraceId& a, const TraceId& b) { return !(a == b); }
};

struct SpanId {
  std::array<uint8_t, 8> bytes{};
  bool valid() const;
  std::string Hex() const;  // 16 lowercase hex digits
  friend bool operator==(const SpanId& a, const SpanId& b) { return a.bytes == b.bytes; }
  friend bool operator!=(const SpanId& a, const SpanId& b) { return !(a == b); }
};

inline constexpr uint8_t kSampledFlag = 0x01;

// What a span hands to its children and to the next process.
struct SpanContext {
  TraceId trace_id;
  SpanId span_id;
  uint8_t flags = 0;        // W3C trace-flags; bit 0 = sampled
  std::string trace_state;  // validated W3C tracestate, "" when none
  bool remote = false;      // came from another process

  bool valid() const { return trace_id.valid() && span_id.valid(); }
  bool sampled() const { return (flags & kSampledFlag) != 0; }
};

// "00-<trace-id>-<parent-id>-<flags>" for a valid context.
std::string FormatTraceparent(const SpanContext& context);

// A traceparent value by the W3C rules: version two lowercase hex digits and not "ff"; for
// version 00 exactly 55 characters; for a later version at least 55, with '-' after the flags
// when longer; trace-id 32 and parent-id 16 lowercase hex digits, neither all zero; flags two
// lowercase hex digits. Surrounding spaces/tabs are ignored. nullopt when malformed.
std::optional<SpanContext> ParseTraceparent(std::string_view value);

// A tracestate value checked by the W3C rules: comma-separated key=value members (empty members
// and spaces around them allowed), at most 32 members, keys unique and well formed (simple
// "key" or multi-tenant "tenant@system"), values 1–256 printable ASCII characters without ',' or
// '=' and not ending in a space. Returns the normalised list ("k1=v1,k2=v2"), "" for an empty
// header, or nullopt when malformed (the caller drops the tracestate, keeping the traceparent).
std::optional<std::string> ParseTracestate(std::string_view value);

// Headers as received: every value of `traceparent` and `tracestate` (several tracestate headers
// are joined with ','; more than one traceparent is malformed). nullopt when there is no valid
// traceparent; the tracestate is kept only when it is valid as well.
std::optional<SpanContext> ExtractContext(const std::vector<std::string_view>& traceparents,
                                          const std::vector<std::string_view>& tracestates);

// Lowercase hex of raw bytes, and back (nullopt for a wrong length or a non-lowercase-hex
// character).
std::string ToHex(const uint8_t* data, size_t n);
bool FromHex(std::string_view hex, uint8_t* out, size_t n);

}  // namespace hap::telemetry
