// Fuzzes the W3C Trace Context parsers (telemetry/trace_context.cc). The input is split into
// lines: each line is parsed as a traceparent and as a tracestate, and the first line with the
// others as its tracestate headers goes through ExtractContext. A parsed traceparent must format
// back to itself (version 00, sampled bit), a normalised tracestate must parse to itself and hold
// only printable ASCII (it is copied into outgoing headers).
#include <string>
#include <string_view>
#include <vector>

#include "telemetry/trace_context.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using hap::telemetry::ParseTraceparent;
using hap::telemetry::ParseTracestate;

void CheckTraceparent(std::string_view line) {
  auto c = ParseTraceparent(line);
  if (!c) return;
  HAP_FUZZ_CHECK(c->valid() && c->remote, "invalid context accepted");
  const std::string formatted = hap::telemetry::FormatTraceparent(*c);
  auto again = ParseTraceparent(formatted);
  HAP_FUZZ_CHECK(again && again->trace_id == c->trace_id && again->span_id == c->span_id &&
                     again->flags == (c->flags & hap::telemetry::kSampledFlag),
                 "'%s' does not parse back", formatted.c_str());
  HAP_FUZZ_CHECK(hap::telemetry::FormatTraceparent(*again) == formatted, "format differs");
}

void CheckTracestate(std::string_view line) {
  auto s = ParseTracestate(line);
  if (!s) return;
  for (char ch : *s) {
    HAP_FUZZ_CHECK(ch >= 0x20 && ch <= 0x7e, "non-printable byte 0x%02x kept", ch & 0xff);
  }
  auto again = ParseTracestate(*s);
  HAP_FUZZ_CHECK(again && *again == *s, "'%s' is not a fixed point", s->c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = hap::fuzz::AsView(data, size);
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos <= text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    lines.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  for (std::string_view line : lines) {
    CheckTraceparent(line);
    CheckTracestate(line);
  }
  const std::vector<std::string_view> parents(lines.begin(), lines.begin() + 1);
  const std::vector<std::string_view> states(lines.begin() + 1, lines.end());
  auto c = hap::telemetry::ExtractContext(parents, states);
  HAP_FUZZ_CHECK(c.has_value() == ParseTraceparent(lines[0]).has_value(),
                 "ExtractContext disagrees with ParseTraceparent");
  if (c && !c->trace_state.empty()) CheckTracestate(c->trace_state);
  HAP_FUZZ_CHECK(!hap::telemetry::ExtractContext(lines, {}) || lines.size() == 1,
                 "several traceparent headers accepted");
  return 0;
}
