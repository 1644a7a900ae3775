// Authentication at the front door (hap-prefill --auth-tokens-file), gRPC and HTTP alike: no
// token, a wrong one and malformed headers are refused with one message; another client's token
// works and is counted for that client; a client over --auth-max-concurrent-per-client is refused
// while another is served; a token taken out of the file stops working within about a second
// (and SIGHUP re-reads the file); health stays open; the SERVER span names the client
// (enduser.id), never the token; hapctl generate --token-file; a bad token setting stops the
// start; the service keeps serving after each.
#include <httplib.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "services/auth/token_auth.h"
#include "tests/e2e/e2e_util.h"
#include "tests/telemetry/test_collector.h"

namespace hap::e2e {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr char kAlice[] = "alice-e2e-token-0123456789";
constexpr char kBob[] = "bob-e2e-token-abcdefghijkl";
constexpr char kCarol[] = "carol-e2e-token-mnopqrstuv";

std::string WorkDir() {
  const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/e2e/auth";
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

std::string TokensFile(const std::vector<std::pair<std::string, std::string>>& clients) {
  std::string text = "# client-id:token (tests/e2e/auth_test.cc)\n\n";
  for (const auto& [id, token] : clients) absl::StrAppend(&text, id, ":", token, "\n");
  return text;
}

class AuthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(MakeTinyModel("auth_tiny8", 3));
    ASSERT_FALSE(model_dir_->empty()) << "hapctl make-tiny failed";
    image_ = new std::string(ReadBytes(TestImagePath()));
    // The front door's spans go to an in-test collector (enduser.id).
    collector_ = new testing::TestCollector();
    ASSERT_TRUE(collector_->Start());
    setenv("OTEL_BSP_SCHEDULE_DELAY", "50", 1);
    tokens_file_ = new std::string(WorkDir() + "/tokens");
    WriteFile(*tokens_file_, TokensFile({{"alice", kAlice}, {"bob", kBob}}));
    sdk::LocalPipelineOptions o;
    o.model_dir = *model_dir_;
    o.bin_dir = HAP_BIN_DIR;
    o.echo_output = false;
    o.openai_port = 0;
    o.prefill_args = {"--auth-tokens-file",
                      *tokens_file_,
                      "--auth-max-concurrent-per-client",
                      "1",
                      "--metrics-port",
                      "0",
                      "--otlp-endpoint",
                      collector_->grpc_address()};
    auto p = sdk::LocalPipeline::Start(o);
    unsetenv("OTEL_BSP_SCHEDULE_DELAY");
    ASSERT_TRUE(p.ok()) << p.status();
    pipeline_ = p->release();
    absl::StatusOr<int> metrics = PrefillMetricsPort(pipeline_);
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_port_ = *metrics;
    const std::string http = pipeline_->openai_address();
    http_port_ = std::stoi(http.substr(http.rfind(':') + 1));
  }
  static void TearDownTestSuite() {
    if (pipeline_ != nullptr) {
      EXPECT_TRUE(pipeline_->Stop().ok());
    }
    delete pipeline_;
    delete model_dir_;
    delete image_;
    delete tokens_file_;
    delete collector_;
  }

  static std::unique_ptr<sdk::Client> Connect(const std::string& token,
                                              sdk::Service s = sdk::Service::kPrefill) {
    sdk::ClientOptions o;
    o.bearer_token = token;
    o.retry.max_attempts = 1;
    auto c = sdk::Client::Connect(pipeline_->address(s), o);
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  }

  static hap::v1::GenerateRequest Short() {
    Ask ask;
    ask.max_new_tokens = 4;
    return ToRequest(ask, *image_);
  }

  // The front door still answers a good request (after every refusal).
  static void ExpectServing() {
    auto got = Connect(kAlice)->Generate(Short());
    EXPECT_TRUE(got.ok()) << "the front door stopped serving: " << got.status();
  }

  static std::string ChatBody(bool stream) {
    const nlohmann::json body = {
        {"messages",
         {{{"role", "user"},
           {"content",
            {{{"type", "image_url"},
              {"image_url", {{"url", "data:image/jpeg;base64," + absl::Base64Escape(*image_)}}}},
             {{"type", "text"}, {"text", "What is in the picture?"}}}}}}},
        {"max_tokens", 4},
        {"stream", stream}};
    return body.dump();
  }

  // POST /v1/chat/completions with `authorization` ("" = no header).
  static httplib::Result Chat(const std::string& authorization, bool stream = false) {
    httplib::Client http("127.0.0.1", http_port_);
    http.set_read_timeout(60, 0);
    httplib::Headers headers;
    if (!authorization.empty()) headers.emplace("Authorization", authorization);
    return http.Post("/v1/chat/completions", headers, ChatBody(stream), "application/json");
  }

  // One sample of prefill's /metrics, e.g. hap_client_requests_total{client="bob"}; -1 if absent.
  static double Metric(const std::string& series) {
    return ScrapeMetric(metrics_port_, series, /*absent=*/-1);
  }

  static std::string* model_dir_;
  static std::string* image_;
  static std::string* tokens_file_;
  static sdk::LocalPipeline* pipeline_;
  static testing::TestCollector* collector_;
  static int metrics_port_;
  static int http_port_;
};
std::string* AuthTest::model_dir_ = nullptr;
std::string* AuthTest::image_ = nullptr;
std::string* AuthTest::tokens_file_ = nullptr;
sdk::LocalPipeline* AuthTest::pipeline_ = nullptr;
testing::TestCollector* AuthTest::collector_ = nullptr;
int AuthTest::metrics_port_ = 0;
int AuthTest::http_port_ = 0;

TEST_F(AuthTest, GrpcRefusesMissingWrongAndMalformedTokensAlike) {
  struct Case {
    const char* name;
    std::string token;  // the SDK's bearer token
    std::vector<std::pair<std::string, std::string>> metadata;
  };
  const std::vector<Case> cases = {
      {"no token", "", {}},
      {"wrong token", "not-a-token-of-this-server-0123", {}},
      {"another scheme", "", {{"authorization", std::string("Basic ") + kAlice}}},
      {"scheme alone", "", {{"authorization", "Bearer"}}},
      {"token without scheme", "", {{"authorization", kAlice}}},
      {"a known token's prefix",
       "",
       {{"authorization", "Bearer " + std::string(kAlice).substr(0, 20)}}},
      {"two authorization entries", kAlice, {{"authorization", std::string("Bearer ") + kBob}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    sdk::StreamOptions stream;
    stream.metadata = c.metadata;
    auto got = Connect(c.token)->Generate(Short(), stream);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kUnauthenticated) << got.status();
    EXPECT_EQ(got.status().message(), svc::kUnauthenticatedMessage);
    EXPECT_EQ(got.status().message().find("e2e-token"), std::string::npos);
  }
  // The right tokens, in the SDK's options or as metadata of one call.
  auto alice = Connect(kAlice)->Generate(Short());
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(alice->attempts, 1);
  sdk::StreamOptions as_metadata;
  as_metadata.metadata = {{"authorization", std::string("bearer ") + kBob}};
  auto bob = Connect("")->Generate(Short(), as_metadata);
  ASSERT_TRUE(bob.ok()) << bob.status();
  // Same answer as alice's: another client's token works just the same.
  EXPECT_EQ(Ids(bob->stats.token_ids()), Ids(alice->stats.token_ids()));
}

// The SERVER span of a call names its client (enduser.id); no attribute of any span holds a token.
TEST_F(AuthTest, SpansCarryTheClientIdNeverTheToken) {
  hap::v1::GenerateRequest req = Short();
  req.set_request_id("auth-span-bob");
  ASSERT_TRUE(Connect(kBob)->Generate(req).ok());
  req.set_request_id("auth-span-nobody");
  EXPECT_FALSE(Connect("")->Generate(req).ok());
  auto generate_span = [](const std::vector<testing::CollectedSpan>& spans, const char* id) {
    for (const testing::CollectedSpan& c : spans) {
      const telemetry::AttributeValue* v = c.span.Find("hap.request_id");
      if (c.span.name == "hap.v1.Generation/Generate" && v != nullptr &&
          std::get_if<std::string>(v) != nullptr && std::get<std::string>(*v) == id) {
        return &c.span;
      }
    }
    return static_cast<const telemetry::SpanData*>(nullptr);
  };
  ASSERT_TRUE(collector_->WaitFor(
      [&](const std::vector<testing::CollectedSpan>& spans) {
        return generate_span(spans, "auth-span-bob") != nullptr;
      },
      milliseconds(10000)))
      << "no Generate span of bob's call";
  const std::vector<testing::CollectedSpan> spans = collector_->Spans();
  const telemetry::SpanData* bob = generate_span(spans, "auth-span-bob");
  const telemetry::AttributeValue* user = bob->Find("enduser.id");
  ASSERT_NE(user, nullptr);
  EXPECT_EQ(std::get<std::string>(*user), "bob");
  for (const testing::CollectedSpan& c : spans) {
    for (const auto& attribute : c.span.attributes) {
      if (const auto* text = std::get_if<std::string>(&attribute.value)) {
        EXPECT_EQ(text->find("e2e-token"), std::string::npos)
            << c.span.name << " " << attribute.key;
      }
    }
  }
}

TEST_F(AuthTest, HealthStaysOpenAndDebugNeedsTheTokenOnTheFrontDoorOnly) {
  auto anonymous = Connect("");
  auto serving = anonymous->IsServing();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  auto state = anonymous->GetState();
  EXPECT_EQ(state.status().code(), absl::StatusCode::kUnauthenticated) << state.status();
  auto wrong = Connect("not-a-token-of-this-server-0123")->GetState();
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated);
  auto mine = Connect(kBob)->GetState();
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->service(), "hap-prefill");
  // The internal services have no tokens: their Debug stays open.
  auto encoder = Connect("", sdk::Service::kEncoder)->GetState();
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  EXPECT_EQ(encoder->service(), "hap-encoder");
  // /metrics is open.
  EXPECT_GE(Metric("hap_auth_tokens"), 2);
  ExpectServing();
}

TEST_F(AuthTest, OpenAiApiNeedsTheBearerAsItsApiKey) {
  for (const std::string& header : {std::string(""), std::string("Bearer wrong-token-0123456789ab"),
                                    std::string("Basic ") + kAlice, std::string("Bearer ")}) {
    SCOPED_TRACE(header);
    auto r = Chat(header);
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 401) << r->body;
    EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
    const nlohmann::json body = nlohmann::json::parse(r->body);
    EXPECT_EQ(body["error"]["code"], "invalid_api_key");
    EXPECT_EQ(body["error"]["type"], "invalid_request_error");
    EXPECT_EQ(body["error"]["message"], svc::kUnauthenticatedMessage);
  }
  auto ok = Chat(std::string("Bearer ") + kAlice);
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(nlohmann::json::parse(ok->body)["object"], "chat.completion");
  auto streamed = Chat(std::string("Bearer ") + kBob, /*stream=*/true);
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  EXPECT_TRUE(absl::StrContains(streamed->body, "data: [DONE]")) << streamed->body;

  httplib::Client http("127.0.0.1", http_port_);
  auto models = http.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  models = http.Get("/v1/models", {{"Authorization", std::string("Bearer ") + kBob}});
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200) << models->body;
  ExpectServing();
}

// One client at its limit is refused (gRPC and HTTP) while another is admitted and served. The
// encoder is stopped (SIGSTOP) to hold requests in flight for as long as the test needs.
TEST_F(AuthTest, PerClientLimitRefusesOneClientWhileAnotherIsServed) {
  const double bob_before = Metric("hap_client_requests_total{client=\"bob\"}");
  sdk::ChildProcess* encoder = pipeline_->process(sdk::Service::kEncoder);
  sdk::StreamOptions bounded;
  bounded.timeout = milliseconds(60000);
  absl::StatusOr<sdk::GenerateResult> alice1, bob1;
  std::thread alice_thread, bob_thread;
  encoder->Signal(SIGSTOP);
  // Whatever happens below, the encoder runs again and the calls end before the test does.
  absl::Cleanup resume = [&] {
    encoder->Signal(SIGCONT);
    if (alice_thread.joinable()) alice_thread.join();
    if (bob_thread.joinable()) bob_thread.join();
  };
  alice_thread = std::thread([&] { alice1 = Connect(kAlice)->Generate(Short(), bounded); });
  auto in_flight = [](const char* client) {
    return Metric(absl::StrCat("hap_client_requests_in_flight{client=\"", client, "\"}"));
  };
  const bool alice_held =
      WaitUntil([&] { return in_flight("alice") == 1; }, milliseconds(10000)).has_value();
  if (alice_held) {
    auto alice2 = Connect(kAlice)->Generate(Short());
    EXPECT_EQ(alice2.status().code(), absl::StatusCode::kResourceExhausted) << alice2.status();
    EXPECT_EQ(alice2.status().message(),
              "client 'alice' is at its limit of 1 requests in flight "
              "(--auth-max-concurrent-per-client)");
    auto http = Chat(std::string("Bearer ") + kAlice);
    EXPECT_TRUE(http && http->status == 429) << (http ? http->body : "no answer");
    if (http) {
      EXPECT_EQ(nlohmann::json::parse(http->body)["error"]["code"], "rate_limit_exceeded");
    }
    // Bob is admitted beside her, counted for bob, and limited on his own.
    bob_thread = std::thread([&] { bob1 = Connect(kBob)->Generate(Short(), bounded); });
    EXPECT_TRUE(WaitUntil([&] { return in_flight("bob") == 1; }, milliseconds(10000)));
    EXPECT_EQ(in_flight("alice"), 1);
    auto bob2 = Connect(kBob)->Generate(Short());
    EXPECT_EQ(bob2.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_TRUE(absl::StrContains(bob2.status().message(), "client 'bob'")) << bob2.status();
  }
  std::move(resume).Invoke();
  ASSERT_TRUE(alice_held) << "alice's request was never in flight";
  EXPECT_TRUE(alice1.ok()) << alice1.status();
  ASSERT_TRUE(bob1.ok()) << bob1.status();
  EXPECT_EQ(Ids(bob1->stats.token_ids()), Ids(alice1->stats.token_ids()));
  EXPECT_EQ(Metric("hap_client_requests_total{client=\"bob\"}"), bob_before + 1);
  EXPECT_GE(Metric("hap_client_requests_limited_total{client=\"alice\"}"), 2);
  EXPECT_TRUE(WaitUntil([&] { return in_flight("alice") == 0 && in_flight("bob") == 0; },
                        milliseconds(2000)));
  // Sequential calls of one client never trip its limit: the slot is back before the answer.
  auto client = Connect(kAlice);
  for (int i = 0; i < 3; ++i) {
    auto got = client->Generate(Short());
    EXPECT_TRUE(got.ok()) << "call " << i << ": " << got.status();
  }
}

TEST_F(AuthTest, ARevokedTokenStopsWorkingWithinASecondOrTwo) {
  auto bob = Connect(kBob);
  ASSERT_TRUE(bob->Generate(Short()).ok());
  // Bob is taken out and carol added, the file rewritten in place as an editor would.
  const auto t0 = Clock::now();
  WriteFile(*tokens_file_, TokensFile({{"alice", kAlice}, {"carol", kCarol}}));
  const std::optional<double> ms = WaitUntil(
      [&] { return bob->GetState().status().code() == absl::StatusCode::kUnauthenticated; },
      milliseconds(5000));
  ASSERT_TRUE(ms.has_value()) << "bob's token still works 5 s after it was revoked";
  const double revoked_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_LT(revoked_ms, 2500) << "the file is checked every second";
  auto refused = bob->Generate(Short());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << refused.status();
  EXPECT_EQ(refused.status().message(), svc::kUnauthenticatedMessage);
  auto http = Chat(std::string("Bearer ") + kBob);
  ASSERT_TRUE(http);
  EXPECT_EQ(http->status, 401);
  auto carol = Connect(kCarol)->Generate(Short());
  EXPECT_TRUE(carol.ok()) << carol.status();

  // A bad file keeps the tokens in force; the front door keeps serving.
  WriteFile(*tokens_file_, "alice " + std::string(kAlice) + "\n");
  std::this_thread::sleep_for(milliseconds(1500));
  EXPECT_TRUE(Connect(kCarol)->Generate(Short()).ok()) << "a bad file revoked the tokens";

  // SIGHUP re-reads the file (and does not stop the process): bob is back, carol gone.
  WriteFile(*tokens_file_, TokensFile({{"alice", kAlice}, {"bob", kBob}}));
  pipeline_->process(sdk::Service::kPrefill)->Signal(SIGHUP);
  EXPECT_TRUE(WaitUntil([&] { return bob->GetState().ok(); }, milliseconds(3000)));
  EXPECT_TRUE(pipeline_->process(sdk::Service::kPrefill)->running());
  EXPECT_EQ(Connect(kCarol)->GetState().status().code(), absl::StatusCode::kUnauthenticated);
  ExpectServing();
}

TEST_F(AuthTest, HapctlGenerateSendsTheTokenFromAFile) {
  const std::string mine = WorkDir() + "/alice.token";
  WriteFile(mine, std::string("# alice's token\n") + kAlice + "\n");
  const std::vector<std::string> generate = {HapctlPath(),
                                             "generate",
                                             "--server",
                                             pipeline_->front_door(),
                                             "--image",
                                             TestImagePath(),
                                             "--prompt",
                                             "What is in the picture?",
                                             "--max-new-tokens",
                                             "4",
                                             "--json"};
  unsetenv("HAP_TOKEN");
  EXPECT_EQ(RunCommand(generate).exit_code, 1) << "served without a token";
  std::vector<std::string> with_file = generate;
  with_file.insert(with_file.end(), {"--token-file", mine});
  const CommandResult ok = RunCommand(with_file);
  ASSERT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_FALSE(nlohmann::json::parse(ok.out)["token_ids"].empty());
  // A server's tokens file and the client to take from it (what the chart's helm test does).
  std::vector<std::string> from_server_file = generate;
  from_server_file.insert(from_server_file.end(),
                          {"--token-file", *tokens_file_, "--token-client", "bob"});
  EXPECT_EQ(RunCommand(from_server_file).exit_code, 0);
  from_server_file.back() = "mallory";
  EXPECT_EQ(RunCommand(from_server_file).exit_code, 1);
  // $HAP_TOKEN when there is no file.
  setenv("HAP_TOKEN", kAlice, 1);
  EXPECT_EQ(RunCommand(generate).exit_code, 0);
  unsetenv("HAP_TOKEN");
}

TEST_F(AuthTest, BadTokenSettingsStopTheStart) {
  const std::string dir = WorkDir();
  const std::string prefill = std::string(HAP_BIN_DIR) + "/hap-prefill";
  const std::vector<std::string> argv = {prefill,          "--port",      "0",
                                         "--encoder-addr", "127.0.0.1:1", "--decode-addr",
                                         "127.0.0.1:1",    "--model",     *model_dir_};
  struct Case {
    const char* name;
    std::vector<std::string> extra;
  };
  WriteFile(dir + "/short", "alice:tooshort\n");
  WriteFile(dir + "/empty", "# nobody\n");
  const std::vector<Case> cases = {
      {"a short token", {"--auth-tokens-file", dir + "/short"}},
      {"no tokens", {"--auth-tokens-file", dir + "/empty"}},
      {"a missing file", {"--auth-tokens-file", dir + "/missing"}},
      {"a limit without tokens", {"--auth-max-concurrent-per-client", "2"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> a = argv;
    a.insert(a.end(), c.extra.begin(), c.extra.end());
    const CommandResult r = RunCommand(a, milliseconds(30000));
    EXPECT_NE(r.exit_code, 0) << c.name;
    EXPECT_EQ(r.out.find("listening"), std::string::npos) << c.name << ": it started";
  }
  // Tokens in the environment are refused, not ignored (the operator meant auth to be on).
  setenv("HAP_AUTH_TOKENS", (std::string("alice:") + kAlice).c_str(), 1);
  const CommandResult inline_tokens = RunCommand(argv, milliseconds(30000));
  unsetenv("HAP_AUTH_TOKENS");
  EXPECT_EQ(inline_tokens.exit_code, 2);
}

}  // namespace
}  // namespace hap::e2e
