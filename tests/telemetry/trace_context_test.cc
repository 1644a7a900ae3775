// W3C Trace Context: traceparent and tracestate parsing by the spec's rules, table-driven.
#include "telemetry/trace_context.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace hap::telemetry {
namespace {

constexpr char kTrace[] = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr char kParent[] = "00f067aa0ba902b7";

std::string Tp(const std::string& version, const std::string& trace, const std::string& parent,
               const std::string& flags) {
  return version + "-" + trace + "-" + parent + "-" + flags;
}

struct TraceparentCase {
  const char* what;
  std::string value;
  bool valid;
  bool sampled;
};

TEST(Traceparent, TableOfValidAndMalformedValues) {
  const std::string ok = Tp("00", kTrace, kParent, "01");
  const TraceparentCase cases[] = {
      {"spec example, sampled", ok, true, true},
      {"not sampled", Tp("00", kTrace, kParent, "00"), true, false},
      {"unknown flag bits are ignored", Tp("00", kTrace, kParent, "09"), true, true},
      {"only an unknown flag bit", Tp("00", kTrace, kParent, "02"), true, false},
      {"surrounding spaces and tabs", " \t" + ok + " ", true, true},
      {"a later version, same length", Tp("01", kTrace, kParent, "01"), true, true},
      {"a later version with more fields", Tp("cc", kTrace, kParent, "01") + "-what-comes-next",
       true, true},
      {"version ff is forbidden", Tp("ff", kTrace, kParent, "01"), false, false},
      {"version 00 with trailing data", ok + "-00", false, false},
      {"version 00 with a trailing character", ok + "x", false, false},
      {"later version with trailing data not after '-'", Tp("cc", kTrace, kParent, "01") + "x1",
       false, false},
      {"uppercase trace id", Tp("00", "4BF92F3577B34DA6A3CE929D0E0E4736", kParent, "01"), false,
       false},
      {"uppercase parent id", Tp("00", kTrace, "00F067AA0BA902B7", "01"), false, false},
      {"uppercase version", Tp("0A", kTrace, kParent, "01"), false, false},
      {"uppercase flags", Tp("00", kTrace, kParent, "0A"), false, false},
      {"all-zero trace id", Tp("00", std::string(32, '0'), kParent, "01"), false, false},
      {"all-zero parent id", Tp("00", kTrace, std::string(16, '0'), "01"), false, false},
      {"non-hex in trace id", Tp("00", "4bf92f3577b34da6a3ce929d0e0e473g", kParent, "01"), false,
       false},
      {"non-hex flags", Tp("00", kTrace, kParent, "0x"), false, false},
      {"short trace id", Tp("00", "4bf92f3577b34da6a3ce929d0e0e473", kParent, "01"), false, false},
      {"long parent id", Tp("00", kTrace, "00f067aa0ba902b71", "1"), false, false},
      {"wrong separator", "00_" + std::string(kTrace) + "-" + kParent + "-01", false, false},
      {"missing flags", "00-" + std::string(kTrace) + "-" + kParent, false, false},
      {"empty", "", false, false},
      {"garbage", "hello", false, false},
  };
  for (const TraceparentCase& c : cases) {
    SCOPED_TRACE(c.what);
    const std::optional<SpanContext> got = ParseTraceparent(c.value);
    ASSERT_EQ(got.has_value(), c.valid) << c.value;
    if (!c.valid) continue;
    EXPECT_EQ(got->trace_id.Hex(), kTrace);
    EXPECT_EQ(got->span_id.Hex(), kParent);
    EXPECT_EQ(got->sampled(), c.sampled);
    EXPECT_TRUE(got->remote);
  }
}

TEST(Traceparent, FormatRoundTripsAndWritesVersion00) {
  for (const char* flags : {"00", "01"}) {
    const std::string v = Tp("00", kTrace, kParent, flags);
    std::optional<SpanContext> c = ParseTraceparent(v);
    ASSERT_TRUE(c);
    EXPECT_EQ(FormatTraceparent(*c), v);
  }
  // A later version is answered in version 00, and flags this version does not define are not
  // passed on.
  std::optional<SpanContext> c = ParseTraceparent(Tp("cc", kTrace, kParent, "09") + "-x");
  ASSERT_TRUE(c);
  EXPECT_EQ(FormatTraceparent(*c), Tp("00", kTrace, kParent, "01"));
}

struct TracestateCase {
  const char* what;
  std::string value;
  std::optional<std::string> normalised;  // nullopt = malformed
};

TEST(Tracestate, TableOfValidAndMalformedValues) {
  std::string thirty_two;
  for (int i = 0; i < 32; ++i) absl::StrAppend(&thirty_two, i ? ",k" : "k", i, "=v");
  const std::string thirty_three = absl::StrCat(thirty_two, ",k32=v");
  const TracestateCase cases[] = {
      {"spec example", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
       "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"},
      {"spaces and empty members", " rojo=1 ,\t, congo=2 ,", "rojo=1,congo=2"},
      {"empty header", "", ""},
      {"multi-tenant key", "fw529a3039@dt=FW4,a@b1=x", "fw529a3039@dt=FW4,a@b1=x"},
      {"tenant may start with a digit", "1tenant@sys=v", "1tenant@sys=v"},
      {"key chars _ - * /", "a_b-c*d/e=v", "a_b-c*d/e=v"},
      {"value with an inner space", "a=b c", "a=b c"},
      {"32 members", thirty_two, thirty_two},
      {"33 members", thirty_three, std::nullopt},
      {"simple key starting with a digit", "1abc=v", std::nullopt},
      {"uppercase key", "Rojo=1", std::nullopt},
      {"duplicate key", "rojo=1,congo=2,rojo=3", std::nullopt},
      {"no '='", "rojo", std::nullopt},
      {"empty value", "rojo=", std::nullopt},
      {"'=' in the value", "rojo=a=b", std::nullopt},
      {"non-ASCII value", "rojo=caf\xc3\xa9", std::nullopt},
      {"control character in value", "rojo=a\x01", std::nullopt},
      {"system id longer than 14", "t@abcdefghijklmno=v", std::nullopt},
      {"system id starting with a digit", "t@1sys=v", std::nullopt},
      {"key of 257 characters", absl::StrCat("a", std::string(256, 'b'), "=v"), std::nullopt},
      {"key of 256 characters", absl::StrCat("a", std::string(255, 'b'), "=v"),
       absl::StrCat("a", std::string(255, 'b'), "=v")},
      {"value of 257 characters", absl::StrCat("a=", std::string(257, 'v')), std::nullopt},
  };
  for (const TracestateCase& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(ParseTracestate(c.value), c.normalised) << c.value;
  }
}

TEST(ExtractContext, HeaderCombinations) {
  const std::string tp = Tp("00", kTrace, kParent, "01");
  // One traceparent, tracestate split over two headers: joined.
  std::optional<SpanContext> c = ExtractContext({tp}, {"rojo=1", "congo=2"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->trace_state, "rojo=1,congo=2");
  // A malformed tracestate is dropped; the traceparent still counts.
  c = ExtractContext({tp}, {"Bad=1"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->trace_state, "");
  // Two traceparent headers: malformed, whatever they say.
  EXPECT_FALSE(ExtractContext({tp, tp}, {}));
  EXPECT_FALSE(ExtractContext({}, {"rojo=1"}));
  EXPECT_FALSE(ExtractContext({"00-bad"}, {"rojo=1"}));
}

TEST(Ids, HexAndValidity) {
  TraceId t;
  EXPECT_FALSE(t.valid());
  t.bytes[15] = 1;
  EXPECT_TRUE(t.valid());
  EXPECT_EQ(t.Hex(), std::string(31, '0') + "1");
  EXPECT_EQ(t.Low64(), 1u);
  uint8_t b[2];
  EXPECT_TRUE(FromHex("0aff", b, 2));
  EXPECT_EQ(b[0], 0x0a);
  EXPECT_EQ(b[1], 0xff);
  EXPECT_FALSE(FromHex("0AFF", b, 2));
  EXPECT_FALSE(FromHex("0af", b, 2));
}

}  // namespace
}  // namespace hap::telemetry
