// Prometheus metrics: exact values through the text exposition (parsed by the strict test
// parser), histogram buckets, escaping, concurrency, and /metrics over the small HTTP server.
// Also checks that the parser itself rejects malformed expositions.
#include "telemetry/metrics.h"

#include <cmath>
#include <thread>

#include "gtest/gtest.h"
#include "telemetry/http_client.h"
#include "telemetry/http_server.h"
#include "tests/telemetry/prom_parser.h"

namespace hap::telemetry {
namespace {

using testing::PromExposition;

TEST(Metrics, CountersGaugesAndCallbacksRenderExactly) {
  Registry r;
  CounterFamily& requests =
      r.AddCounter("hap_requests_total", "Requests by RPC and code.", {"rpc", "code"});
  requests.Labels({"hap.v1.Generation/Generate", "OK"}).Inc();
  requests.Labels({"hap.v1.Generation/Generate", "OK"}).Inc(2);
  requests.Labels({"hap.v1.Generation/Generate", "INVALID_ARGUMENT"}).Inc();
  requests.Labels({"x", "y"}).Inc(-5);  // ignored: counters only go up
  EXPECT_EQ(&r.AddCounter("hap_requests_total", "again", {"rpc", "code"}), &requests);
  GaugeFamily& inflight = r.AddGauge("hap_requests_in_flight", "In flight.");
  inflight.Get().Inc();
  inflight.Get().Inc();
  inflight.Get().Dec();
  r.AddCallbackGauge("hap_kv_leases_held", "Leases.", [] { return 3.0; });
  r.AddCallbackCounter("hap_trace_spans_dropped_total", "Drops.", [] { return 12.0; });
  r.AddCounter("hap_flops_saved_total", "FLOPs.").Get().Inc(3.5e12);

  absl::StatusOr<PromExposition> e = PromExposition::Parse(r.Render());
  ASSERT_TRUE(e.ok()) << e.status() << "\n" << r.Render();
  EXPECT_EQ(e->family("hap_requests_total")->type, "counter");
  EXPECT_EQ(e->family("hap_requests_total")->help, "Requests by RPC and code.");
  EXPECT_EQ(e->Value("hap_requests_total", {{"code", "OK"}}), 3.0);
  EXPECT_EQ(e->Value("hap_requests_total", {{"code", "INVALID_ARGUMENT"}}), 1.0);
  EXPECT_EQ(e->Value("hap_requests_total", {{"rpc", "x"}}), 0.0);
  EXPECT_EQ(e->Value("hap_requests_in_flight"), 1.0);
  EXPECT_EQ(e->family("hap_requests_in_flight")->type, "gauge");
  EXPECT_EQ(e->Value("hap_kv_leases_held"), 3.0);
  EXPECT_EQ(e->Value("hap_trace_spans_dropped_total"), 12.0);
  EXPECT_EQ(e->Value("hap_flops_saved_total"), 3.5e12);
}

TEST(Metrics, HistogramBucketsAreInclusiveAndCumulative) {
  Registry r;
  Histogram& h =
      r.AddHistogram("hap_ttft_seconds", "TTFT.", {0.1, 0.5, 1}, {"service"}).Labels({"prefill"});
  for (double v : {0.05, 0.1, 0.3, 0.5, 0.7, 2.0}) h.Observe(v);
  absl::StatusOr<PromExposition> e = PromExposition::Parse(r.Render());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->Value("hap_ttft_seconds_bucket", {{"le", "0.1"}}), 2.0);  // 0.05 and 0.1
  EXPECT_EQ(e->Value("hap_ttft_seconds_bucket", {{"le", "0.5"}}), 4.0);
  EXPECT_EQ(e->Value("hap_ttft_seconds_bucket", {{"le", "1"}}), 5.0);
  EXPECT_EQ(e->Value("hap_ttft_seconds_bucket", {{"le", "+Inf"}}), 6.0);
  EXPECT_EQ(e->Value("hap_ttft_seconds_count", {{"service", "prefill"}}), 6.0);
  EXPECT_NEAR(*e->Value("hap_ttft_seconds_sum"), 3.65, 1e-12);
  const std::vector<double> b = ExponentialBuckets(0.001, 2, 4);
  EXPECT_EQ(b, (std::vector<double>{0.001, 0.002, 0.004, 0.008}));
}

TEST(Metrics, LabelValuesAndHelpAreEscaped) {
  Registry r;
  r.AddCounter("weird_total", "line one\nback\\slash", {"v"})
      .Labels({"quote\" back\\ newline\n end"})
      .Inc();
  const std::string text = r.Render();
  EXPECT_NE(text.find(R"(v="quote\" back\\ newline\n end")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(# HELP weird_total line one\nback\\slash)"), std::string::npos);
  absl::StatusOr<PromExposition> e = PromExposition::Parse(text);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->Value("weird_total", {{"v", "quote\" back\\ newline\n end"}}), 1.0);
}

TEST(Metrics, ValueFormatting) {
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(1e21), "1e+21");
  EXPECT_EQ(FormatValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatValue(-INFINITY), "-Inf");
  EXPECT_EQ(FormatValue(NAN), "NaN");
}

TEST(Metrics, ConcurrentIncrementsAreExact) {
  Registry r;
  CounterFamily& c = r.AddCounter("c_total", "c", {"t"});
  Histogram& h = r.AddHistogram("h_seconds", "h", {1}).Get();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        c.Labels({"x"}).Inc();
        h.Observe(0.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  absl::StatusOr<PromExposition> e = PromExposition::Parse(r.Render());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->Value("c_total"), 80000.0);
  EXPECT_EQ(e->Value("h_seconds_count"), 80000.0);
  EXPECT_EQ(e->Value("h_seconds_sum"), 40000.0);
}

TEST(PromParser, RejectsMalformedExpositions) {
  const char* bad[] = {
      "no_newline 1",
      "1bad_name 1\n",
      "m{l=\"unterminated} 1\n",
      "m{l=\"bad\\escape\"} 1\n",
      "m{l=\"a\",l=\"b\"} 1\n",
      "m notanumber\n",
      "m{} \n",
      "# TYPE m counter\nm -1\n",
      "# TYPE m gauge\nm 1\n# TYPE m counter\n",
      "a 1\nb 1\na 2\n",
      "m 1\nm 2\n",
      "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
      "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
      "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
      "# TYPE m sometype\n",
  };
  for (const char* text : bad) {
    EXPECT_FALSE(PromExposition::Parse(text).ok()) << text;
  }
  EXPECT_TRUE(PromExposition::Parse("# a comment\nm{a=\"1\",b=\"2\"} 1.5e3 1700000000\n").ok());
}

TEST(HttpServer, ServesMetricsAndAnswers404) {
  Registry r;
  r.AddCounter("hap_scrapes_total", "x").Get().Inc(7);
  HttpServer server;
  server.Handle("/metrics", [&](const HttpRequest& req) {
    HttpResponse resp;
    resp.content_type = kPrometheusContentType;
    resp.body = r.Render();
    return resp;
  });
  ASSERT_TRUE(server.Start("127.0.0.1", 0).ok());
  ASSERT_GT(server.port(), 0);
  const HttpUrl url{"127.0.0.1", server.port(), "/metrics"};
  absl::StatusOr<HttpResult> got = HttpGet(url, std::chrono::seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status, 200);
  absl::StatusOr<PromExposition> e = PromExposition::Parse(got->body);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->Value("hap_scrapes_total"), 7.0);
  got = HttpGet({"127.0.0.1", server.port(), "/other"}, std::chrono::seconds(5));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->status, 404);
  server.Stop();
}

TEST(HttpClient, ParsesUrls) {
  absl::StatusOr<HttpUrl> u = ParseHttpUrl("http://collector:4318/v1/traces");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "collector");
  EXPECT_EQ(u->port, 4318);
  EXPECT_EQ(u->path, "/v1/traces");
  u = ParseHttpUrl("http://[::1]:9/x");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(ParseHttpUrl("http://h")->port, 80);
  EXPECT_FALSE(ParseHttpUrl("https://h/x").ok());
  EXPECT_FALSE(ParseHttpUrl("http://h:notaport/x").ok());
  EXPECT_FALSE(ParseHttpUrl("h:1").ok());
}

}  // namespace
}  // namespace hap::telemetry
