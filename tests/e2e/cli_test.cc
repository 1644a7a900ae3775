// `hapctl up` starts the three services and prints the front door and "ready"; `hapctl generate`
// against it prints what `hapctl run` prints; SIGINT stops everything with exit code 0.
#include <signal.h>

#include <filesystem>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "sdk/child_process.h"
#include "sdk/client.h"
#include "tests/e2e/e2e_util.h"

namespace hap::e2e {
namespace {

using std::chrono::milliseconds;

TEST(HapctlUpTest, UpGenerateAndStop) {
  const std::string model = MakeTinyModel("cli_tiny8", 2);
  ASSERT_FALSE(model.empty());
  setenv("HAP_BIN_DIR", HAP_BIN_DIR, 1);
  auto up = sdk::ChildProcess::Spawn(
      {HapctlPath(), "up", "--model", model, "--method", "hap", "--retain", "8", "--quiet"}, "");
  ASSERT_TRUE(up.ok()) << up.status();
  auto ready =
      (*up)->WaitForLine([](const std::string& l) { return l.find("ready") != std::string::npos; },
                         milliseconds(60000));
  ASSERT_TRUE(ready.ok()) << ready.status();
  auto address = (*up)->WaitForLine(
      [](const std::string& l) {
        return l.find(':') != std::string::npos && l.find(' ') == std::string::npos;
      },
      milliseconds(100));
  ASSERT_TRUE(address.ok()) << "no host:port line before ready";

  Ask ask;
  ask.method = "hap";
  ask.retain = "8";
  ask.seed = 5;
  ask.max_new_tokens = 14;
  std::string error;
  const nlohmann::json run = HapctlRun(model, ask, &error);
  ASSERT_TRUE(error.empty()) << error;
  const std::vector<std::string> generate = {
      HapctlPath(), "generate", "--server", *address, "--image", TestImagePath(),    "--prompt",
      ask.prompt,   "--retain", "8",        "--seed", "5",       "--max-new-tokens", "14"};
  std::vector<std::string> as_json = generate;
  as_json.push_back("--json");
  const CommandResult j = RunCommand(as_json);
  ASSERT_EQ(j.exit_code, 0) << j.out;
  const nlohmann::json got = nlohmann::json::parse(j.out);
  EXPECT_EQ(got["token_ids"], run["token_ids"]);
  EXPECT_EQ(got["text"], run["text"]);
  EXPECT_EQ(got["finish_reason"], run["finish_reason"]);
  EXPECT_EQ(got["kv_bytes"], run["pruning"]["kv_bytes"]);
  EXPECT_EQ(got["method"], "hap");

  const CommandResult plain = RunCommand(generate);
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_EQ(plain.out.rfind(run["text"].get<std::string>(), 0), 0u) << plain.out;
  EXPECT_NE(plain.out.find("-- finish: "), std::string::npos) << plain.out;

  // A bad request is a one-line error and exit code 2, as for `hapctl run`.
  std::vector<std::string> bad = generate;
  bad.insert(bad.end(), {"--method", "magic"});
  EXPECT_EQ(RunCommand(bad).exit_code, 2);

  // A client pointed at a service that is not the front door is told so (gRPC itself answers
  // UNIMPLEMENTED with no message).
  const size_t enc = ready->find("hap-encoder ");
  ASSERT_NE(enc, std::string::npos) << *ready;
  const std::string encoder = ready->substr(enc + 12, ready->find(',', enc) - (enc + 12));
  auto wrong = sdk::Client::Connect(encoder);
  ASSERT_TRUE(wrong.ok());
  auto refused = (*wrong)->Generate(ToRequest(ask, ReadBytes(TestImagePath())));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(refused.status().message().find("the server at " + encoder +
                                            " does not serve hap.v1.Generation/Generate"),
            std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("not a HAP serve front door"), std::string::npos);
  std::vector<std::string> to_encoder = generate;
  to_encoder[3] = encoder;
  EXPECT_EQ(RunCommand(to_encoder).exit_code, 1);

  (*up)->Signal(SIGINT);
  const std::optional<int> code = (*up)->Wait(milliseconds(30000));
  ASSERT_TRUE(code.has_value()) << "hapctl up did not stop";
  EXPECT_EQ(*code, 0);
  auto client = sdk::Client::Connect(*address);
  ASSERT_TRUE(client.ok());
  EXPECT_FALSE(client.value()->IsServing(milliseconds(500)).ok()) << "the front door is still up";
}

}  // namespace
}  // namespace hap::e2e

namespace hap::e2e {
namespace {

// Retries: UNAVAILABLE before any token is retried with exponential backoff, within the deadline.
TEST(SdkTest, RetriesUnavailableWithBackoffWithinTheDeadline) {
  sdk::ClientOptions o;
  o.retry.max_attempts = 4;
  o.retry.initial_backoff_ms = 100;
  auto client = sdk::Client::Connect("127.0.0.1:1", o);  // nothing listens on port 1
  ASSERT_TRUE(client.ok());
  hap::v1::GenerateRequest req;
  auto t0 = std::chrono::steady_clock::now();
  auto got = (*client)->Generate(req);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_GE(ms, 100 + 200 + 400);  // three backoffs between four attempts
  sdk::StreamOptions short_deadline;
  short_deadline.timeout = milliseconds(250);
  t0 = std::chrono::steady_clock::now();
  got = (*client)->Generate(req, short_deadline);
  ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(got.ok());
  EXPECT_LT(ms, 1000) << "retries must stop at the deadline";
}

// A self-signed certificate for "localhost" (used as CA, server and client certificate) in
// <build>/tests/e2e/<name>; false when openssl cannot make one.
bool MakeTestCertificate(const std::string& name, std::string* cert, std::string* key) {
  const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/e2e/" + name;
  std::filesystem::create_directories(dir);
  *cert = dir + "/cert.pem";
  *key = dir + "/key.pem";
  return RunCommand({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                     "-keyout", *key, "-out", *cert, "-days", "1", "-subj", "/CN=localhost",
                     "-addext", "subjectAltName=DNS:localhost"})
             .exit_code == 0;
}

sdk::ClientOptions MutualTls(const std::string& cert, const std::string& key) {
  sdk::ClientOptions tls;
  tls.tls.enabled = true;
  tls.tls.root_certs_file = cert;
  tls.tls.client_cert_file = cert;
  tls.tls.client_key_file = key;
  tls.tls.server_name_override = "localhost";
  return tls;
}

// A service serving mutual TLS; the SDK connects with the CA, a client certificate and key, and
// is refused without them. Its --health-port answers health checks in plaintext, for the
// kubelet's probes, and nothing else.
TEST(TlsTest, SdkTalksMutualTlsToAService) {
  std::string cert, key;
  if (!MakeTestCertificate("tls", &cert, &key)) {
    GTEST_SKIP() << "openssl could not make a test certificate";
  }
  const std::string model = MakeTinyModel("tls_tiny8", 1);
  ASSERT_FALSE(model.empty());
  auto decode = sdk::ChildProcess::Spawn(
      {std::string(HAP_BIN_DIR) + "/hap-decode", "--host", "127.0.0.1", "--port", "0", "--model",
       model, "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", cert, "--health-port", "0"},
      "");
  ASSERT_TRUE(decode.ok()) << decode.status();
  auto line = (*decode)->WaitForLine(
      [](const std::string& l) { return sdk::ParseListeningPort(l) > 0; }, milliseconds(30000));
  ASSERT_TRUE(line.ok()) << line.status();
  const std::string address = "127.0.0.1:" + std::to_string(sdk::ParseListeningPort(*line));
  auto health_line = (*decode)->WaitForLine(
      [](const std::string& l) { return l.find("hap-decode health checks on ") == 0; },
      milliseconds(30000));
  ASSERT_TRUE(health_line.ok()) << health_line.status();
  const std::string health_at = health_line->substr(28, health_line->find(' ', 28) - 28);

  sdk::ClientOptions tls = MutualTls(cert, key);
  ASSERT_TRUE(sdk::WaitUntilServing(address, milliseconds(30000), tls).ok());
  // The probe port: SERVING in plaintext, without a certificate; Debug is not served there.
  auto probe = sdk::Client::Connect(health_at);
  ASSERT_TRUE(probe.ok());
  auto serving = (*probe)->IsServing(milliseconds(2000));
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  EXPECT_EQ((*probe)->GetState(milliseconds(2000)).status().code(),
            absl::StatusCode::kUnimplemented);
  auto client = sdk::Client::Connect(address, tls);
  ASSERT_TRUE(client.ok());
  auto state = (*client)->GetState();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->service(), "hap-decode");

  sdk::ClientOptions no_client_cert = tls;
  no_client_cert.tls.client_cert_file.clear();
  no_client_cert.tls.client_key_file.clear();
  auto anonymous = sdk::Client::Connect(address, no_client_cert);
  ASSERT_TRUE(anonymous.ok());
  EXPECT_FALSE((*anonymous)->GetState(milliseconds(2000)).ok());
  auto plaintext = sdk::Client::Connect(address);
  ASSERT_TRUE(plaintext.ok());
  EXPECT_FALSE((*plaintext)->GetState(milliseconds(2000)).ok());
  EXPECT_EQ((*decode)->Terminate(milliseconds(10000)), 0);
}

// Starts one service binary and returns it with its address (127.0.0.1:port).
std::unique_ptr<sdk::ChildProcess> StartService(const std::string& binary,
                                                const std::vector<std::string>& flags,
                                                std::string* address) {
  std::vector<std::string> argv = {std::string(HAP_BIN_DIR) + "/" + binary, "--host", "127.0.0.1",
                                   "--port", "0"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto child = sdk::ChildProcess::Spawn(argv, "");
  if (!child.ok()) return nullptr;
  auto line = (*child)->WaitForLine(
      [](const std::string& l) { return sdk::ParseListeningPort(l) > 0; }, milliseconds(30000));
  if (!line.ok()) return nullptr;
  *address = "127.0.0.1:" + std::to_string(sdk::ParseListeningPort(*line));
  return std::move(*child);
}

// All three services on mutual TLS: prefill calls the encoder and decode with its client
// certificate (--peer-tls-*), and the answer equals `hapctl run`. Without the peer credentials the
// same request fails as UNAVAILABLE (the peers refuse plaintext) and prefill keeps serving.
TEST(TlsTest, PipelineRunsOnMutualTlsBetweenServices) {
  std::string cert, key;
  if (!MakeTestCertificate("tls-pipeline", &cert, &key)) {
    GTEST_SKIP() << "openssl could not make a test certificate";
  }
  const std::string model = MakeTinyModel("tls_tiny8", 1);
  ASSERT_FALSE(model.empty());
  const std::vector<std::string> serve_tls = {"--model",     model, "--tls-cert", cert, "--tls-key",
                                              key,           "--tls-client-ca",   cert};
  std::string encoder_addr, decode_addr, prefill_addr, plain_prefill_addr;
  auto encoder = StartService("hap-encoder", serve_tls, &encoder_addr);
  ASSERT_NE(encoder, nullptr);
  auto decode = StartService("hap-decode", serve_tls, &decode_addr);
  ASSERT_NE(decode, nullptr);
  std::vector<std::string> prefill_flags = serve_tls;
  prefill_flags.insert(prefill_flags.end(),
                       {"--encoder-addr", encoder_addr, "--decode-addr", decode_addr,
                        "--peer-tls-ca", cert, "--peer-tls-cert", cert, "--peer-tls-key", key,
                        "--peer-tls-server-name", "localhost"});
  auto prefill = StartService("hap-prefill", prefill_flags, &prefill_addr);
  ASSERT_NE(prefill, nullptr);
  // A second front door with TLS towards clients but plaintext towards its peers.
  std::vector<std::string> plain_peer_flags = serve_tls;
  plain_peer_flags.insert(plain_peer_flags.end(),
                          {"--encoder-addr", encoder_addr, "--decode-addr", decode_addr});
  auto plain_prefill = StartService("hap-prefill", plain_peer_flags, &plain_prefill_addr);
  ASSERT_NE(plain_prefill, nullptr);

  sdk::ClientOptions tls = MutualTls(cert, key);
  tls.retry.max_attempts = 1;
  ASSERT_TRUE(sdk::WaitUntilServing(prefill_addr, milliseconds(30000), tls).ok());
  ASSERT_TRUE(sdk::WaitUntilServing(plain_prefill_addr, milliseconds(30000), tls).ok());

  Ask ask;
  ask.method = "hap";
  ask.retain = "8";
  std::string error;
  const nlohmann::json run = HapctlRun(model, ask, &error);
  ASSERT_TRUE(error.empty()) << error;
  auto client = sdk::Client::Connect(prefill_addr, tls);
  ASSERT_TRUE(client.ok());
  auto got = (*client)->Generate(ToRequest(ask, ReadBytes(TestImagePath())));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Ids(got->stats.token_ids()), run["token_ids"].get<std::vector<int32_t>>());

  auto plain_client = sdk::Client::Connect(plain_prefill_addr, tls);
  ASSERT_TRUE(plain_client.ok());
  sdk::StreamOptions bounded;
  bounded.timeout = milliseconds(10000);
  auto refused = (*plain_client)->Generate(ToRequest(ask, ReadBytes(TestImagePath())), bounded);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  const absl::StatusOr<bool> serving = (*plain_client)->IsServing(milliseconds(2000));
  EXPECT_TRUE(serving.ok() && *serving) << serving.status();

  for (auto* child : {plain_prefill.get(), prefill.get(), decode.get(), encoder.get()}) {
    EXPECT_EQ(child->Terminate(milliseconds(10000)), 0);
  }
}

}  // namespace
}  // namespace hap::e2e
