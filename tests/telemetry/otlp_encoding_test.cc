// OTLP encoding: the serialized request is walked with a hand-written protobuf wire reader and
// checked against the OTLP field numbers and wire types, typed here independently of the
// project's .proto files; then a decode round trip.
#include <cstring>
#include <map>

#include "gtest/gtest.h"
#include "telemetry/otlp_encoder.h"
#include "telemetry/tracer.h"

namespace hap::telemetry {
namespace {

// One protobuf field as it appears on the wire.
struct WireField {
  int number = 0;
  int wire_type = 0;  // 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
  uint64_t scalar = 0;
  std::string bytes;
};

bool ReadVarint(const std::string& s, size_t* pos, uint64_t* out) {
  *out = 0;
  for (int shift = 0; shift < 64 && *pos < s.size(); shift += 7) {
    const uint8_t b = static_cast<uint8_t>(s[(*pos)++]);
    *out |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// Every top-level field of a message, in order; fails the test on malformed input.
std::vector<WireField> Fields(const std::string& msg) {
  std::vector<WireField> out;
  size_t pos = 0;
  while (pos < msg.size()) {
    uint64_t key = 0;
    EXPECT_TRUE(ReadVarint(msg, &pos, &key));
    WireField f;
    f.number = static_cast<int>(key >> 3);
    f.wire_type = static_cast<int>(key & 7);
    switch (f.wire_type) {
      case 0:
        EXPECT_TRUE(ReadVarint(msg, &pos, &f.scalar));
        break;
      case 1:
        std::memcpy(&f.scalar, msg.data() + pos, 8);
        pos += 8;
        break;
      case 5: {
        uint32_t v = 0;
        std::memcpy(&v, msg.data() + pos, 4);
        f.scalar = v;
        pos += 4;
        break;
      }
      case 2: {
        uint64_t len = 0;
        EXPECT_TRUE(ReadVarint(msg, &pos, &len));
        f.bytes = msg.substr(pos, len);
        pos += len;
        break;
      }
      default:
        ADD_FAILURE() << "wire type " << f.wire_type;
        return out;
    }
    out.push_back(f);
  }
  EXPECT_EQ(pos, msg.size());
  return out;
}

std::vector<WireField> All(const std::vector<WireField>& fields, int number) {
  std::vector<WireField> out;
  for (const WireField& f : fields) {
    if (f.number == number) out.push_back(f);
  }
  return out;
}

WireField One(const std::vector<WireField>& fields, int number, int wire_type) {
  const std::vector<WireField> all = All(fields, number);
  EXPECT_EQ(all.size(), 1u) << "field " << number;
  if (all.empty()) return {};
  EXPECT_EQ(all[0].wire_type, wire_type) << "field " << number;
  return all[0];
}

// key → AnyValue message of each KeyValue (KeyValue: key = 1, value = 2).
std::map<std::string, std::vector<WireField>> KeyValues(const std::vector<WireField>& kvs) {
  std::map<std::string, std::vector<WireField>> out;
  for (const WireField& kv : kvs) {
    const std::vector<WireField> f = Fields(kv.bytes);
    out[One(f, 1, 2).bytes] = Fields(One(f, 2, 2).bytes);
  }
  return out;
}

SpanData SampleSpan() {
  SpanData s;
  s.context.trace_id = NewTraceId();
  s.context.span_id = NewSpanId();
  s.context.flags = kSampledFlag;
  s.context.trace_state = "rojo=1";
  s.parent_span_id = NewSpanId();
  s.parent_remote = true;
  s.name = "hap.prefill.group";
  s.kind = SpanKind::kClient;
  s.start_unix_ns = 1700000000123456789ull;
  s.end_unix_ns = 1700000000223456789ull;
  s.attributes = {{"s", std::string("text")},
                  {"b", true},
                  {"i", int64_t{-7}},
                  {"d", 0.25},
                  {"ai", std::vector<int64_t>{3, 4}}};
  s.events = {{1700000000200000000ull, "first_token", {{"n", int64_t{1}}}}};
  s.status = StatusCode::kError;
  s.status_message = "boom";
  s.dropped_attributes = 2;
  return s;
}

TEST(OtlpEncoding, SpanFieldNumbersAndWireTypes) {
  const SpanData s = SampleSpan();
  opentelemetry::proto::trace::v1::Span proto;
  EncodeSpan(s, &proto);
  const std::vector<WireField> f = Fields(proto.SerializeAsString());
  // Span: trace_id 1, span_id 2, trace_state 3, parent_span_id 4, name 5, kind 6,
  // start 7 (fixed64), end 8 (fixed64), attributes 9, dropped_attributes_count 10, events 11,
  // status 15, flags 16 (fixed32).
  EXPECT_EQ(One(f, 1, 2).bytes,
            std::string(s.context.trace_id.bytes.begin(), s.context.trace_id.bytes.end()));
  EXPECT_EQ(One(f, 2, 2).bytes,
            std::string(s.context.span_id.bytes.begin(), s.context.span_id.bytes.end()));
  EXPECT_EQ(One(f, 3, 2).bytes, "rojo=1");
  EXPECT_EQ(One(f, 4, 2).bytes.size(), 8u);
  EXPECT_EQ(One(f, 5, 2).bytes, "hap.prefill.group");
  EXPECT_EQ(One(f, 6, 0).scalar, 3u);  // SPAN_KIND_CLIENT
  EXPECT_EQ(One(f, 7, 1).scalar, s.start_unix_ns);
  EXPECT_EQ(One(f, 8, 1).scalar, s.end_unix_ns);
  EXPECT_EQ(One(f, 10, 0).scalar, 2u);
  // flags: W3C sampled bit, plus "has is_remote" (0x100) and "is remote" (0x200).
  EXPECT_EQ(One(f, 16, 5).scalar, 0x301u);

  // AnyValue: string 1, bool 2, int 3 (varint, two's complement), double 4 (fixed64),
  // array 5 (ArrayValue.values = 1).
  const auto kv = KeyValues(All(f, 9));
  ASSERT_EQ(kv.size(), 5u);
  EXPECT_EQ(One(kv.at("s"), 1, 2).bytes, "text");
  EXPECT_EQ(One(kv.at("b"), 2, 0).scalar, 1u);
  EXPECT_EQ(static_cast<int64_t>(One(kv.at("i"), 3, 0).scalar), -7);
  const uint64_t d_bits = One(kv.at("d"), 4, 1).scalar;
  double d = 0;
  std::memcpy(&d, &d_bits, 8);
  EXPECT_EQ(d, 0.25);
  const std::vector<WireField> arr = All(Fields(One(kv.at("ai"), 5, 2).bytes), 1);
  ASSERT_EQ(arr.size(), 2u);
  EXPECT_EQ(One(Fields(arr[1].bytes), 3, 0).scalar, 4u);

  // Event: time 1 (fixed64), name 2, attributes 3.
  const std::vector<WireField> ev = Fields(One(f, 11, 2).bytes);
  EXPECT_EQ(One(ev, 1, 1).scalar, 1700000000200000000ull);
  EXPECT_EQ(One(ev, 2, 2).bytes, "first_token");
  EXPECT_EQ(KeyValues(All(ev, 3)).count("n"), 1u);

  // Status: message 2, code 3 (ERROR = 2); field 1 is retired.
  const std::vector<WireField> st = Fields(One(f, 15, 2).bytes);
  EXPECT_EQ(One(st, 2, 2).bytes, "boom");
  EXPECT_EQ(One(st, 3, 0).scalar, 2u);
  EXPECT_TRUE(All(st, 1).empty());
}

TEST(OtlpEncoding, RequestNesting) {
  SpanBatch batch;
  batch.push_back(std::make_unique<SpanData>(SampleSpan()));
  batch.push_back(std::make_unique<SpanData>(SampleSpan()));
  const Resource r = Resource::ForService("hap-decode", {{"deployment.environment", "ci"}});
  const std::string wire = EncodeRequest(r, batch).SerializeAsString();
  // ExportTraceServiceRequest.resource_spans = 1
  const std::vector<WireField> req = Fields(wire);
  const std::vector<WireField> rs = Fields(One(req, 1, 2).bytes);
  // ResourceSpans: resource 1, scope_spans 2; Resource.attributes 1.
  const auto res = KeyValues(All(Fields(One(rs, 1, 2).bytes), 1));
  EXPECT_EQ(One(res.at("service.name"), 1, 2).bytes, "hap-decode");
  EXPECT_EQ(One(res.at("deployment.environment"), 1, 2).bytes, "ci");
  EXPECT_EQ(res.count("telemetry.sdk.language"), 1u);
  // ScopeSpans: scope 1 (InstrumentationScope: name 1, version 2), spans 2.
  const std::vector<WireField> ss = Fields(One(rs, 2, 2).bytes);
  const std::vector<WireField> scope = Fields(One(ss, 1, 2).bytes);
  EXPECT_EQ(One(scope, 1, 2).bytes, kScopeName);
  EXPECT_EQ(One(scope, 2, 2).bytes, kScopeVersion);
  EXPECT_EQ(All(ss, 2).size(), 2u);
}

TEST(OtlpEncoding, RootSpanHasNoParentAndUnsetStatusIsOmitted) {
  SpanData s = SampleSpan();
  s.parent_span_id = SpanId();
  s.parent_remote = false;
  s.status = StatusCode::kUnset;
  s.context.trace_state.clear();
  opentelemetry::proto::trace::v1::Span proto;
  EncodeSpan(s, &proto);
  const std::vector<WireField> f = Fields(proto.SerializeAsString());
  EXPECT_TRUE(All(f, 4).empty());
  EXPECT_TRUE(All(f, 15).empty());
  EXPECT_TRUE(All(f, 3).empty());
  EXPECT_EQ(One(f, 16, 5).scalar, 0x101u);  // is_remote known, not remote
}

TEST(OtlpEncoding, DecodeRoundTrip) {
  const SpanData s = SampleSpan();
  opentelemetry::proto::trace::v1::Span proto;
  EncodeSpan(s, &proto);
  const SpanData d = DecodeSpan(proto);
  EXPECT_EQ(d.context.trace_id, s.context.trace_id);
  EXPECT_EQ(d.context.span_id, s.context.span_id);
  EXPECT_EQ(d.parent_span_id, s.parent_span_id);
  EXPECT_EQ(d.context.flags, s.context.flags);
  EXPECT_EQ(d.parent_remote, true);
  EXPECT_EQ(d.name, s.name);
  EXPECT_EQ(d.kind, s.kind);
  EXPECT_EQ(d.start_unix_ns, s.start_unix_ns);
  EXPECT_EQ(d.end_unix_ns, s.end_unix_ns);
  ASSERT_EQ(d.attributes.size(), s.attributes.size());
  for (size_t i = 0; i < s.attributes.size(); ++i) {
    EXPECT_EQ(d.attributes[i].key, s.attributes[i].key);
    EXPECT_EQ(d.attributes[i].value, s.attributes[i].value);
  }
  EXPECT_EQ(d.events.size(), 1u);
  EXPECT_EQ(d.status, StatusCode::kError);
  EXPECT_EQ(d.status_message, "boom");
}

}  // namespace
}  // namespace hap::telemetry
