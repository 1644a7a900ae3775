#include "telemetry/trace_context.h"

#include <algorithm>
#include <set>

namespace hap::telemetry {
namespace {

int HexValue(char c) {  // lowercase only, as the W3C grammar (HEXDIGLC) demands
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool AllZero(const uint8_t* data, size_t n) {
  return std::all_of(data, data + n, [](uint8_t b) { return b == 0; });
}

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsLcAlpha(char c) { return c >= 'a' && c <= 'z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsKeyChar(char c) {
  return IsLcAlpha(c) || IsDigit(c) || c == '_' || c == '-' || c == '*' || c == '/';
}

// simple-key = lcalpha 0*255(keychar)
// multi-tenant-key = tenant-id "@" system-id
//   tenant-id = (lcalpha / DIGIT) 0*240(keychar), system-id = lcalpha 0*13(keychar)
bool ValidKey(std::string_view key) {
  const size_t at = key.find('@');
  auto chars_ok = [](std::string_view s) { return std::all_of(s.begin(), s.end(), IsKeyChar); };
  if (at == std::string_view::npos) {
    return !key.empty() && key.size() <= 256 && IsLcAlpha(key[0]) && chars_ok(key);
  }
  const std::string_view tenant = key.substr(0, at), system = key.substr(at + 1);
  return !tenant.empty() && tenant.size() <= 241 && (IsLcAlpha(tenant[0]) || IsDigit(tenant[0])) &&
         chars_ok(tenant) && !system.empty() && system.size() <= 14 && IsLcAlpha(system[0]) &&
         chars_ok(system);
}

// value = 0*255(chr) nblk-chr; chr = %x20 / nblk-chr; nblk-chr = %x21-2B / %x2D-3C / %x3E-7E
bool ValidValue(std::string_view value) {
  if (value.empty() || value.size() > 256 || value.back() == ' ') return false;
  return std::all_of(value.begin(), value.end(),
                     [](char c) { return c >= 0x20 && c <= 0x7e && c != ',' && c != '='; });
}

}  // namespace

bool TraceId::valid() const { return !AllZero(bytes.data(), bytes.size()); }
std::string TraceId::Hex() const { return ToHex(bytes.data(), bytes.size()); }
uint64_t TraceId::Low64() const {
  uint64_t v = 0;
  for (int i = 8; i < 16; ++i) v = (v << 8) | bytes[i];
  return v;
}

bool SpanId::valid() const { return !AllZero(bytes.data(), bytes.size()); }
std::string SpanId::Hex() const { return ToHex(bytes.data(), bytes.size()); }

std::string ToHex(const uint8_t* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

bool FromHex(std::string_view hex, uint8_t* out, size_t n) {
  if (hex.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
    const int hi = HexValue(hex[2 * i]), lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

std::string FormatTraceparent(const SpanContext& c) {
  const uint8_t flags = c.flags & kSampledFlag;  // only the flags this version defines
  return "00-" + c.trace_id.Hex() + "-" + c.span_id.Hex() + "-" + ToHex(&flags, 1);
}

std::optional<SpanContext> ParseTraceparent(std::string_view value) {
  value = TrimOws(value);
  // version "-" trace-id "-" parent-id "-" trace-flags = 2+1+32+1+16+1+2 = 55 characters.
  constexpr size_t kLength = 55;
  if (value.size() < kLength) return std::nullopt;
  uint8_t version = 0;
  if (!FromHex(value.substr(0, 2), &version, 1) || version == 0xff) return std::nullopt;
  if (version == 0 && value.size() != kLength) return std::nullopt;
  // A later version may append fields, but only after another '-'.
  if (value.size() > kLength && value[kLength] != '-') return std::nullopt;
  if (value[2] != '-' || value[35] != '-' || value[52] != '-') return std::nullopt;
  SpanContext c;
  if (!FromHex(value.substr(3, 32), c.trace_id.bytes.data(), 16) ||
      !FromHex(value.substr(36, 16), c.span_id.bytes.data(), 8) ||
      !FromHex(value.substr(53, 2), &c.flags, 1)) {
    return std::nullopt;
  }
  if (!c.trace_id.valid() || !c.span_id.valid()) return std::nullopt;
  c.remote = true;
  return c;
}

std::optional<std::string> ParseTracestate(std::string_view value) {
  std::string out;
  std::set<std::string_view> keys;
  size_t pos = 0;
  while (pos <= value.size()) {
    size_t comma = value.find(',', pos);
    if (comma == std::string_view::npos) comma = value.size();
    const std::string_view member = TrimOws(value.substr(pos, comma - pos));
    pos = comma + 1;
    if (member.empty()) continue;  // empty list members are allowed and dropped
    const size_t eq = member.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string_view key = member.substr(0, eq), val = member.substr(eq + 1);
    if (!ValidKey(key) || !ValidValue(val)) return std::nullopt;
    if (!keys.insert(key).second) return std::nullopt;  // duplicate key
    if (keys.size() > 32) return std::nullopt;
    if (!out.empty()) out += ',';
    out.append(member);
  }
  return out;
}

std::optional<SpanContext> ExtractContext(const std::vector<std::string_view>& traceparents,
                                          const std::vector<std::string_view>& tracestates) {
  if (traceparents.size() != 1) return std::nullopt;
  std::optional<SpanContext> c = ParseTraceparent(traceparents[0]);
  if (!c) return std::nullopt;
  if (!tracestates.empty()) {
    std::string joined;
    for (size_t i = 0; i < tracestates.size(); ++i) {
      if (i > 0) joined += ',';
      joined.append(tracestates[i]);
    }
    if (std::optional<std::string> state = ParseTracestate(joined)) c->trace_state = *state;
  }
  return c;
}

}  // namespace hap::telemetry
