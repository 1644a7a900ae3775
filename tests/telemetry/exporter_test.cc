// The batching processor (bounded queue, drops counted, never blocks the caller, flush and
// shutdown with a stalled exporter) and the OTLP exporters against the test collector over gRPC
// and HTTP, with the collector up, down and stalled.
#include <chrono>
#include <condition_variable>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "telemetry/batch_processor.h"
#include "telemetry/otlp_exporters.h"
#include "telemetry/tracer.h"
#include "telemetry/tracing.h"
#include "tests/telemetry/test_collector.h"

namespace hap::telemetry {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::unique_ptr<SpanData> MakeSpan(const std::string& name) {
  auto s = std::make_unique<SpanData>();
  s->context.trace_id = NewTraceId();
  s->context.span_id = NewSpanId();
  s->context.flags = kSampledFlag;
  s->name = name;
  s->start_unix_ns = NowUnixNanos();
  s->end_unix_ns = s->start_unix_ns + 1000;
  return s;
}

// An exporter that blocks in Export until released (or cancelled), counting what it got.
class GateExporter final : public SpanExporter {
 public:
  absl::Status Export(const SpanBatch& batch) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++calls_;
    max_batch_ = std::max(max_batch_, batch.size());
    cv_.wait(lock, [&] { return open_ || cancelled_; });
    if (cancelled_) return absl::CancelledError("cancelled");
    got_ += batch.size();
    return fail_ ? absl::UnavailableError("down") : absl::OkStatus();
  }
  void Cancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }
  void Open(bool fail = false) {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    fail_ = fail;
    cv_.notify_all();
  }
  size_t got() const {
    std::lock_guard<std::mutex> lock(mu_);
    return got_;
  }
  int calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  size_t max_batch() const {
    std::lock_guard<std::mutex> lock(mu_);
    return max_batch_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false, cancelled_ = false, fail_ = false;
  size_t got_ = 0, max_batch_ = 0;
  int calls_ = 0;
};

TEST(BatchProcessor, ExportsEverythingInBoundedBatches) {
  auto exporter = std::make_unique<InMemoryExporter>();
  InMemoryExporter* mem = exporter.get();
  BatchOptions o;
  o.max_queue_size = 4096;
  o.max_export_batch_size = 100;
  o.schedule_delay = milliseconds(10000);  // only size and flush trigger exports here
  BatchSpanProcessor p(std::move(exporter), o);
  for (int i = 0; i < 1050; ++i) p.OnEnd(MakeSpan(absl::StrCat("s", i)));
  ASSERT_TRUE(p.ForceFlush(milliseconds(5000)));
  EXPECT_EQ(mem->size(), 1050u);
  EXPECT_GE(mem->batches(), 11);
  const ExportStats s = p.stats();
  EXPECT_EQ(s.spans_queued, 1050u);
  EXPECT_EQ(s.spans_exported, 1050u);
  EXPECT_EQ(s.dropped(), 0u);
  // Order is kept.
  const std::vector<SpanData> spans = mem->Spans();
  for (int i = 0; i < 1050; ++i) ASSERT_EQ(spans[i].name, absl::StrCat("s", i));
}

TEST(BatchProcessor, ScheduleDelayExportsASmallQueue) {
  auto exporter = std::make_unique<InMemoryExporter>();
  InMemoryExporter* mem = exporter.get();
  BatchOptions o;
  o.schedule_delay = milliseconds(50);
  BatchSpanProcessor p(std::move(exporter), o);
  p.OnEnd(MakeSpan("lonely"));
  const auto t0 = Clock::now();
  while (mem->size() == 0 && MsSince(t0) < 5000) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(mem->size(), 1u);
  EXPECT_LT(MsSince(t0), 2000);
}

TEST(BatchProcessor, FullQueueDropsAndCountsWithoutBlocking) {
  auto exporter = std::make_unique<GateExporter>();
  GateExporter* gate = exporter.get();
  BatchOptions o;
  o.max_queue_size = 10;
  o.max_export_batch_size = 4;
  o.schedule_delay = milliseconds(1);
  BatchSpanProcessor p(std::move(exporter), o);
  // The worker takes a first batch and blocks in the exporter; the queue then fills.
  p.OnEnd(MakeSpan("first"));
  const auto t_wait = Clock::now();
  while (gate->calls() == 0 && MsSince(t_wait) < 5000) std::this_thread::sleep_for(milliseconds(1));
  ASSERT_EQ(gate->calls(), 1);
  double worst_ms = 0;
  for (int i = 0; i < 1000; ++i) {
    auto span = MakeSpan("x");
    const auto t0 = Clock::now();
    p.OnEnd(std::move(span));
    worst_ms = std::max(worst_ms, MsSince(t0));
  }
  // Never a wait on the exporter: each OnEnd is a short critical section.
  EXPECT_LT(worst_ms, 1000.0);  // the exporter is blocked for good: any wait on it would hang
  ExportStats s = p.stats();
  EXPECT_EQ(s.queue_size, 10u);
  EXPECT_EQ(s.dropped_queue_full, 990u);
  gate->Open();
  ASSERT_TRUE(p.ForceFlush(milliseconds(5000)));
  s = p.stats();
  EXPECT_EQ(gate->got(), 11u);  // the first span plus a full queue
  EXPECT_EQ(s.spans_exported, 11u);
  EXPECT_EQ(s.spans_exported + s.dropped(), 1001u);
  EXPECT_LE(gate->max_batch(), 4u);
}

TEST(BatchProcessor, FailedExportsAreCountedAsDrops) {
  auto exporter = std::make_unique<GateExporter>();
  exporter->Open(/*fail=*/true);
  BatchOptions o;
  o.max_export_batch_size = 8;
  BatchSpanProcessor p(std::move(exporter), o);
  for (int i = 0; i < 20; ++i) p.OnEnd(MakeSpan("x"));
  ASSERT_TRUE(p.ForceFlush(milliseconds(5000)));
  const ExportStats s = p.stats();
  EXPECT_EQ(s.spans_exported, 0u);
  EXPECT_EQ(s.dropped_export_failed, 20u);
  EXPECT_GE(s.export_failures, 3u);  // at most 8 per batch
  EXPECT_LE(s.export_failures, 20u);
}

TEST(BatchProcessor, ShutdownWithAStalledExporterReturnsAndCountsTheRest) {
  auto exporter = std::make_unique<GateExporter>();
  BatchOptions o;
  o.max_queue_size = 100;
  o.max_export_batch_size = 10;
  o.schedule_delay = milliseconds(1);
  BatchSpanProcessor p(std::move(exporter), o);
  for (int i = 0; i < 50; ++i) p.OnEnd(MakeSpan("x"));
  const auto t0 = Clock::now();
  p.Shutdown(milliseconds(200));
  EXPECT_LT(MsSince(t0), 2000);
  const ExportStats s = p.stats();
  EXPECT_EQ(s.spans_exported, 0u);
  EXPECT_EQ(s.dropped(), 50u);  // the cancelled batch + what was left queued
  p.OnEnd(MakeSpan("late"));    // after shutdown: dropped, not queued
  EXPECT_EQ(p.stats().dropped(), 51u);
}

OtlpOptions Options(const std::string& endpoint, milliseconds timeout = milliseconds(5000)) {
  OtlpOptions o;
  o.endpoint = endpoint;
  o.timeout = timeout;
  o.resource = Resource::ForService("exporter-test", {{"deployment.environment", "test"}});
  return o;
}

SpanBatch OneBatch() {
  SpanBatch b;
  auto s = MakeSpan("hap.test");
  s->kind = SpanKind::kServer;
  s->attributes.push_back({"answer", int64_t{42}});
  s->status = StatusCode::kError;
  s->status_message = "bad";
  b.push_back(std::move(s));
  b.push_back(MakeSpan("second"));
  return b;
}

TEST(OtlpGrpcExporter, DeliversSpansWithTheResource) {
  testing::TestCollector collector;
  ASSERT_TRUE(collector.Start());
  auto e = OtlpGrpcExporter::Create(Options("http://" + collector.grpc_address()));
  ASSERT_TRUE(e.ok()) << e.status();
  const SpanBatch batch = OneBatch();
  ASSERT_TRUE((*e)->Export(batch).ok());
  const std::vector<testing::CollectedSpan> got = collector.Spans();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].service, "exporter-test");
  EXPECT_EQ(got[0].span.name, "hap.test");
  EXPECT_EQ(got[0].span.context.trace_id, batch[0]->context.trace_id);
  EXPECT_EQ(got[0].span.kind, SpanKind::kServer);
  EXPECT_EQ(std::get<int64_t>(*got[0].span.Find("answer")), 42);
  EXPECT_EQ(got[0].span.status, StatusCode::kError);
  EXPECT_EQ(got[0].span.status_message, "bad");
}

TEST(OtlpGrpcExporter, CollectorDownFailsFast) {
  int port = 0;
  {  // a port that was free a moment ago
    testing::TestCollector c;
    ASSERT_TRUE(c.Start());
    port = std::stoi(c.grpc_address().substr(c.grpc_address().rfind(':') + 1));
  }
  auto e = OtlpGrpcExporter::Create(Options("127.0.0.1:" + std::to_string(port)));
  ASSERT_TRUE(e.ok());
  const auto t0 = Clock::now();
  EXPECT_FALSE((*e)->Export(OneBatch()).ok());
  EXPECT_LT(MsSince(t0), 3000);
}

TEST(OtlpGrpcExporter, StalledCollectorHitsTheTimeoutAndCancelEndsItSooner) {
  testing::TestCollector collector;
  ASSERT_TRUE(collector.Start());
  collector.SetStalled(true);
  auto e = OtlpGrpcExporter::Create(Options(collector.grpc_address(), milliseconds(300)));
  ASSERT_TRUE(e.ok());
  auto t0 = Clock::now();
  EXPECT_FALSE((*e)->Export(OneBatch()).ok());
  EXPECT_GE(MsSince(t0), 250);
  EXPECT_LT(MsSince(t0), 3000);

  auto slow = OtlpGrpcExporter::Create(Options(collector.grpc_address(), milliseconds(20000)));
  ASSERT_TRUE(slow.ok());
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(200));
    (*slow)->Cancel();
  });
  t0 = Clock::now();
  EXPECT_FALSE((*slow)->Export(OneBatch()).ok());
  EXPECT_LT(MsSince(t0), 5000);
  canceller.join();
  collector.SetStalled(false);
}

TEST(OtlpHttpExporter, PostsProtobufToV1Traces) {
  testing::TestCollector collector;
  ASSERT_TRUE(collector.Start(/*with_http=*/true));
  auto e = OtlpHttpExporter::Create(Options(collector.http_base_url() + "/v1/traces"));
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE((*e)->Export(OneBatch()).ok());
  const std::vector<testing::CollectedSpan> got = collector.Spans();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].span.name, "second");
  EXPECT_EQ(got[1].service, "exporter-test");
  // A wrong path is an HTTP error, reported as a failed export.
  auto wrong = OtlpHttpExporter::Create(Options(collector.http_base_url() + "/nope"));
  ASSERT_TRUE(wrong.ok());
  EXPECT_FALSE((*wrong)->Export(OneBatch()).ok());
  EXPECT_FALSE(OtlpHttpExporter::Create(Options("https://localhost:4318/v1/traces")).ok());
}

TEST(TracingConfig, FromTheEnvironment) {
  std::map<std::string, std::string> env;
  auto getenv = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  absl::StatusOr<TracingConfig> c = TracingConfigFromEnv("hap-prefill", getenv);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->enabled());  // off by default
  EXPECT_EQ(c->service_name, "hap-prefill");
  EXPECT_EQ(c->protocol, "grpc");
  EXPECT_EQ(c->sampler, "parentbased_always_on");
  EXPECT_EQ(c->batch.max_queue_size, 2048u);

  env = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"},
         {"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"},
         {"OTEL_SERVICE_NAME", "front"},
         {"OTEL_TRACES_SAMPLER", "traceidratio"},
         {"OTEL_TRACES_SAMPLER_ARG", "0.1"},
         {"OTEL_BSP_MAX_QUEUE_SIZE", "64"},
         {"OTEL_BSP_SCHEDULE_DELAY", "100"},
         {"OTEL_EXPORTER_OTLP_TIMEOUT", "250"},
         {"OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b,x=y"},
         {"OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod"}};
  c = TracingConfigFromEnv("hap-prefill", getenv);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->enabled());
  EXPECT_EQ(c->service_name, "front");
  EXPECT_EQ(c->protocol, "http/protobuf");
  EXPECT_EQ(c->sampler_arg, "0.1");
  EXPECT_EQ(c->batch.max_queue_size, 64u);
  EXPECT_EQ(c->batch.schedule_delay, milliseconds(100));
  EXPECT_EQ(c->export_timeout, milliseconds(250));
  ASSERT_EQ(c->headers.size(), 2u);
  EXPECT_EQ(c->headers[0].second, "a b");
  ASSERT_EQ(c->resource_attributes.size(), 1u);
  absl::StatusOr<std::unique_ptr<Tracing>> t = Tracing::Start(*c, /*install_global=*/false);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE((*t)->Describe().find("http://collector:4318/v1/traces"), std::string::npos);
  (*t)->Shutdown(milliseconds(10));

  env["OTEL_SDK_DISABLED"] = "true";
  EXPECT_FALSE(TracingConfigFromEnv("x", getenv)->enabled());
  env.erase("OTEL_SDK_DISABLED");
  env["OTEL_BSP_MAX_QUEUE_SIZE"] = "lots";
  EXPECT_FALSE(TracingConfigFromEnv("x", getenv).ok());
  env["OTEL_BSP_MAX_QUEUE_SIZE"] = "64";
  c = TracingConfigFromEnv("x", getenv);
  c->protocol = "carrier-pigeon";
  EXPECT_FALSE(Tracing::Start(*c, false).ok());
  c->protocol = "grpc";
  c->sampler = "sometimes";
  EXPECT_FALSE(Tracing::Start(*c, false).ok());
}

TEST(Tracing, EndToEndThroughTheGrpcCollector) {
  testing::TestCollector collector;
  ASSERT_TRUE(collector.Start());
  TracingConfig c;
  c.service_name = "pipeline-test";
  c.endpoint = collector.grpc_address();
  c.batch.schedule_delay = milliseconds(20);
  absl::StatusOr<std::unique_ptr<Tracing>> t = Tracing::Start(c, /*install_global=*/false);
  ASSERT_TRUE(t.ok());
  {
    Span root = (*t)->tracer().StartSpan("root", SpanKind::kServer, SpanContext());
    Span child = (*t)->tracer().StartSpan("child", root);
  }
  ASSERT_TRUE(collector.WaitFor([](const auto& s) { return s.size() == 2; }, milliseconds(5000)));
  const auto spans = collector.Spans();
  EXPECT_EQ(spans[0].span.name, "child");
  EXPECT_EQ(spans[0].span.parent_span_id, spans[1].span.context.span_id);
  EXPECT_EQ(spans[0].service, "pipeline-test");
  EXPECT_TRUE((*t)->ForceFlush(milliseconds(5000)));
  EXPECT_EQ((*t)->stats().spans_exported, 2u);
}

// What instrumented code pays per span (printed; the bounds are loose so a busy machine passes):
// tracing off, on with a healthy exporter, and on with a stalled exporter and a full queue.
TEST(Overhead, PerSpanCostOnTheRequestPath) {
  auto per_span_ns = [](const Tracer& tracer, int n) {
    const Span root = tracer.StartSpan("root", SpanKind::kServer, SpanContext());
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      Span s = tracer.StartSpan("hap.prefill.group", root);
      s.SetAttribute("hap.group.index", i)
          .SetAttribute("hap.visual_tokens.in", 576)
          .SetAttribute("hap.visual_tokens.out", 144)
          .SetAttribute("hap.paq.head_mean", 0.42)
          .SetAttribute("hap.group.time_ms", 1.5);
      s.End();
    }
    return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
  };
  const int n = 20000;
  const double off = per_span_ns(Tracer(), n);

  BatchOptions big;
  big.max_queue_size = 2 * n;
  auto healthy = std::make_shared<BatchSpanProcessor>(std::make_unique<InMemoryExporter>(), big);
  const double on = per_span_ns(Tracer(TraceSampler(), healthy), n);

  auto gate = std::make_unique<GateExporter>();
  GateExporter* g = gate.get();
  BatchOptions small;
  small.max_queue_size = 64;
  auto stalled = std::make_shared<BatchSpanProcessor>(std::move(gate), small);
  const double full = per_span_ns(Tracer(TraceSampler(), stalled), n);
  EXPECT_GT(stalled->stats().dropped_queue_full, 0u);
  std::printf(
      "[ overhead ] per span with 5 attributes: tracing off %.0f ns, on %.0f ns, "
      "on with a stalled collector (queue full, dropping) %.0f ns\n",
      off, on, full);
  EXPECT_LT(off, 5000);  // loose: sanitizer builds on a busy machine are ~30x slower
  EXPECT_LT(on, 1000000);
  EXPECT_LT(full, 1000000);
  g->Open();
  healthy->Shutdown(std::chrono::seconds(5));
  stalled->Shutdown(std::chrono::seconds(5));
}

}  // namespace
}  // namespace hap::telemetry
