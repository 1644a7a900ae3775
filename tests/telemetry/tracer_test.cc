// Tracer, spans and the sampler: ids and parent links, parent-based and ratio sampling,
// attributes/events/status, limits, and that a disabled tracer records nothing.
#include "telemetry/tracer.h"

#include <set>

#include "gtest/gtest.h"
#include "telemetry/batch_processor.h"
#include "telemetry/trace_sampler.h"

namespace hap::telemetry {
namespace {

// Collects ended spans synchronously.
class Sink final : public SpanProcessor {
 public:
  void OnEnd(std::unique_ptr<SpanData> span) override { spans.push_back(*span); }
  std::vector<SpanData> spans;
};

TEST(Tracer, DisabledTracerRecordsNothing) {
  Tracer tracer;
  EXPECT_FALSE(tracer.enabled());
  Span s = tracer.StartSpan("x", SpanKind::kServer, SpanContext());
  EXPECT_FALSE(s.recording());
  EXPECT_FALSE(s.context().valid());
  s.SetAttribute("k", 1).SetAttribute("s", "v");
  s.AddEvent("e");
  s.SetStatus(StatusCode::kError, "boom");
  s.End();
  // The global tracer is disabled until one is installed.
  EXPECT_FALSE(GlobalTracer().enabled());
}

TEST(Tracer, RootAndChildSpans) {
  auto sink = std::make_shared<Sink>();
  Tracer tracer(TraceSampler(), sink);
  Span root = tracer.StartSpan("root", SpanKind::kServer, SpanContext());
  ASSERT_TRUE(root.recording());
  EXPECT_TRUE(root.context().valid());
  EXPECT_TRUE(root.context().sampled());
  Span child = tracer.StartSpan("child", root, SpanKind::kClient);
  EXPECT_EQ(child.context().trace_id, root.context().trace_id);
  EXPECT_NE(child.context().span_id, root.context().span_id);
  child.End();
  root.End();
  root.End();  // idempotent
  ASSERT_EQ(sink->spans.size(), 2u);
  const SpanData& c = sink->spans[0];
  const SpanData& r = sink->spans[1];
  EXPECT_EQ(c.name, "child");
  EXPECT_EQ(c.kind, SpanKind::kClient);
  EXPECT_EQ(c.parent_span_id, r.context.span_id);
  EXPECT_FALSE(c.parent_remote);
  EXPECT_FALSE(r.parent_span_id.valid());
  EXPECT_LE(r.start_unix_ns, c.start_unix_ns);
  EXPECT_GE(r.end_unix_ns, c.end_unix_ns);
}

TEST(Tracer, RemoteParentIsContinued) {
  auto sink = std::make_shared<Sink>();
  Tracer tracer(TraceSampler(), sink);
  std::optional<SpanContext> remote =
      ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(remote);
  remote->trace_state = "rojo=1";
  Span s = tracer.StartSpan("server", SpanKind::kServer, *remote);
  EXPECT_EQ(s.context().trace_id.Hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(s.context().trace_state, "rojo=1");  // passed on
  s.End();
  ASSERT_EQ(sink->spans.size(), 1u);
  EXPECT_EQ(sink->spans[0].parent_span_id.Hex(), "00f067aa0ba902b7");
  EXPECT_TRUE(sink->spans[0].parent_remote);
}

TEST(Tracer, ParentBasedSamplingFollowsTheParent) {
  auto sink = std::make_shared<Sink>();
  Tracer tracer(TraceSampler(), sink);  // parentbased_always_on
  std::optional<SpanContext> unsampled =
      ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  Span s = tracer.StartSpan("server", SpanKind::kServer, *unsampled);
  EXPECT_FALSE(s.recording());
  // Not recorded, but the trace continues (with the flag off) for the next hop.
  EXPECT_TRUE(s.context().valid());
  EXPECT_EQ(s.context().trace_id, unsampled->trace_id);
  EXPECT_FALSE(s.context().sampled());
  Span child = tracer.StartSpan("child", s);
  EXPECT_FALSE(child.recording());
  s.End();
  child.End();
  EXPECT_TRUE(sink->spans.empty());

  // always_on ignores the parent's flag.
  Tracer always(TraceSampler(TraceSampler::Root::kAlwaysOn, 1, false), sink);
  Span forced = always.StartSpan("server", SpanKind::kServer, *unsampled);
  EXPECT_TRUE(forced.recording());
}

TEST(TraceSampler, ParseNamesAndArguments) {
  EXPECT_EQ(TraceSampler::Parse("", "")->Describe(), "parentbased_always_on");
  EXPECT_EQ(TraceSampler::Parse("always_off", "")->Describe(), "always_off");
  EXPECT_EQ(TraceSampler::Parse("traceidratio", "0.25")->Describe(), "traceidratio{0.25}");
  EXPECT_EQ(TraceSampler::Parse("parentbased_traceidratio", "")->Describe(),
            "parentbased_traceidratio{1}");
  EXPECT_FALSE(TraceSampler::Parse("sometimes", "").ok());
  EXPECT_FALSE(TraceSampler::Parse("traceidratio", "1.5").ok());
  EXPECT_FALSE(TraceSampler::Parse("traceidratio", "-0.1").ok());
  EXPECT_FALSE(TraceSampler::Parse("traceidratio", "half").ok());
}

TEST(TraceSampler, RatioComparesTheLow64BitsOfTheTraceId) {
  TraceId t;
  t.bytes[0] = 0xff;                           // high bits do not matter
  EXPECT_TRUE(TraceSampler::RatioSamples(0.5, t));  // low 64 bits = 0
  for (int i = 8; i < 16; ++i) t.bytes[i] = 0xff;
  EXPECT_FALSE(TraceSampler::RatioSamples(0.999, t));
  EXPECT_TRUE(TraceSampler::RatioSamples(1.0, t));
  t.bytes[8] = 0x7f;  // 2^63 − 1: just inside half
  EXPECT_TRUE(TraceSampler::RatioSamples(0.5, t));
  t.bytes[8] = 0x80;
  for (int i = 9; i < 16; ++i) t.bytes[i] = 0;  // exactly 2^63
  EXPECT_FALSE(TraceSampler::RatioSamples(0.5, t));
  EXPECT_FALSE(TraceSampler::RatioSamples(0.0, TraceId{}));
}

TEST(TraceSampler, RatioKeepsAboutThatFractionAndIsDeterministic) {
  const TraceSampler s(TraceSampler::Root::kRatio, 0.25, false);
  int kept = 0;
  const int n = 40000;
  for (int i = 0; i < n; ++i) {
    const TraceId id = NewTraceId();
    const bool a = s.ShouldSample(nullptr, id);
    EXPECT_EQ(a, s.ShouldSample(nullptr, id));  // same trace, same answer (every process)
    kept += a;
  }
  // Binomial(40000, 0.25): sd ≈ 87; 6 sd either side.
  EXPECT_NEAR(kept, n / 4, 520);
}

TEST(Ids, RandomAndDistinct) {
  std::set<std::string> traces, spans;
  for (int i = 0; i < 1000; ++i) {
    const TraceId t = NewTraceId();
    const SpanId s = NewSpanId();
    EXPECT_TRUE(t.valid());
    EXPECT_TRUE(s.valid());
    traces.insert(t.Hex());
    spans.insert(s.Hex());
  }
  EXPECT_EQ(traces.size(), 1000u);
  EXPECT_EQ(spans.size(), 1000u);
}

TEST(Span, AttributesEventsStatusAndLimits) {
  auto sink = std::make_shared<Sink>();
  Tracer tracer(TraceSampler(), sink);
  {
    Span s = tracer.StartSpan("s", SpanKind::kInternal, SpanContext());
    s.SetAttribute("int", 7).SetAttribute("int", 8);  // overwritten, not duplicated
    s.SetAttribute("u64", uint64_t{5}).SetAttribute("double", 0.5).SetAttribute("bool", true);
    s.SetAttribute("str", "text").SetAttribute("ints", std::vector<int>{1, 2, 3});
    s.SetAttribute("names", std::vector<std::string>{"a", "b"});
    for (int i = 0; i < 200; ++i) s.SetAttribute("k" + std::to_string(i), i);
    s.AddEvent("first", {{"n", int64_t{1}}});
    for (int i = 0; i < 200; ++i) s.AddEvent("more");
    s.SetStatus(StatusCode::kError, "broke");
  }  // the destructor ends it
  ASSERT_EQ(sink->spans.size(), 1u);
  const SpanData& d = sink->spans[0];
  EXPECT_EQ(d.attributes.size(), kMaxAttributes);
  EXPECT_EQ(d.dropped_attributes, 7 + 200 - kMaxAttributes);
  EXPECT_EQ(std::get<int64_t>(*d.Find("int")), 8);
  EXPECT_EQ(std::get<int64_t>(*d.Find("u64")), 5);
  EXPECT_EQ(std::get<double>(*d.Find("double")), 0.5);
  EXPECT_EQ(std::get<bool>(*d.Find("bool")), true);
  EXPECT_EQ(std::get<std::string>(*d.Find("str")), "text");
  EXPECT_EQ(std::get<std::vector<int64_t>>(*d.Find("ints")), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(d.events.size(), kMaxEvents);
  EXPECT_EQ(d.dropped_events, 201 - kMaxEvents);
  EXPECT_EQ(d.events[0].name, "first");
  EXPECT_EQ(d.status, StatusCode::kError);
  EXPECT_EQ(d.status_message, "broke");
}

TEST(Span, OkStatusHasNoMessageAndMoveAssignmentEndsTheOldSpan) {
  auto sink = std::make_shared<Sink>();
  Tracer tracer(TraceSampler(), sink);
  Span a = tracer.StartSpan("a", SpanKind::kInternal, SpanContext());
  a.SetStatus(StatusCode::kOk, "ignored");
  a = tracer.StartSpan("b", SpanKind::kInternal, SpanContext());
  ASSERT_EQ(sink->spans.size(), 1u);
  EXPECT_EQ(sink->spans[0].name, "a");
  EXPECT_EQ(sink->spans[0].status, StatusCode::kOk);
  EXPECT_EQ(sink->spans[0].status_message, "");
  Span moved = std::move(a);
  EXPECT_EQ(sink->spans.size(), 1u);
  moved.End();
  EXPECT_EQ(sink->spans.back().name, "b");
}

TEST(Span, ExplicitTimesAreKept) {
  auto sink = std::make_shared<Sink>();
  Tracer tracer(TraceSampler(), sink);
  Span s = tracer.StartSpan("t", SpanKind::kInternal, SpanContext(), 1000);
  s.End(5000);
  ASSERT_EQ(sink->spans.size(), 1u);
  EXPECT_EQ(sink->spans[0].start_unix_ns, 1000u);
  EXPECT_EQ(sink->spans[0].end_unix_ns, 5000u);
  const auto t = std::chrono::steady_clock::now() - std::chrono::milliseconds(250);
  const int64_t ago = static_cast<int64_t>(NowUnixNanos()) - static_cast<int64_t>(ToUnixNanos(t));
  EXPECT_NEAR(ago / 1e6, 250, 50);
}

}  // namespace
}  // namespace hap::telemetry
