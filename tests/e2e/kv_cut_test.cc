// The KV stream cut halfway: hap-prefill reaches hap-decode through a TCP proxy in this test,
// which resets both sides once a set number of bytes went upstream during a KV transfer. The
// client gets UNAVAILABLE naming decode within its deadline (the SDK's retry before the first
// token then serves it); neither side keeps the cache, its lease or its blocks; the next request
// through the proxy is served.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdk/child_process.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "tests/e2e/e2e_util.h"

namespace hap::e2e {
namespace {

using std::chrono::milliseconds;

// Forwards 127.0.0.1:port() to 127.0.0.1:target. Once armed with CutAfter(n), the connection
// that has carried n more bytes upstream is reset on both sides (SO_LINGER 0).
class TcpProxy {
 public:
  explicit TcpProxy(int target) : target_(target) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(listen_fd_, 16);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~TcpProxy() {
    stop_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    accept_thread_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    for (std::thread& t : pumps_) t.join();
    for (int fd : fds_) close(fd);
  }
  int port() const { return port_; }
  void CutAfter(int64_t bytes) { cut_after_ = bytes; }
  int cuts() const { return cuts_; }

 private:
  void AcceptLoop() {
    while (!stop_) {
      const int client = accept(listen_fd_, nullptr, nullptr);
      if (client < 0) return;
      const int server = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(target_);
      if (connect(server, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        close(client);
        close(server);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(client);
      fds_.push_back(server);
      pumps_.emplace_back([this, client, server] { Pump(client, server, true); });
      pumps_.emplace_back([this, client, server] { Pump(server, client, false); });
    }
  }

  void Pump(int from, int to, bool upstream) {
    char buf[16384];
    for (;;) {
      const ssize_t n = read(from, buf, sizeof(buf));
      if (n <= 0) break;
      if (upstream && cut_after_ > 0) {
        const int64_t left = cut_after_.fetch_sub(n);
        if (left - n <= 0) {
          cut_after_ = 0;
          ++cuts_;
          Reset(from);
          Reset(to);
          return;
        }
      }
      // MSG_NOSIGNAL: the other direction may have reset `to` already (EPIPE, not SIGPIPE).
      if (send(to, buf, n, MSG_NOSIGNAL) != n) break;
    }
    shutdown(to, SHUT_WR);
  }

  static void Reset(int fd) {
    linger l{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    shutdown(fd, SHUT_RDWR);
  }

  const int target_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> cut_after_{0};
  std::atomic<int> cuts_{0};
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> pumps_;
  std::thread accept_thread_;
};

TEST(KvCutTest, TransferCutHalfwayFreesBothSides) {
  const std::string model = MakeTinyModel("kv_cut_tiny8", 6);
  ASSERT_FALSE(model.empty());
  // Encoder and decode from the pipeline; a second front door reaches decode through the proxy.
  sdk::LocalPipelineOptions o;
  o.model_dir = model;
  o.bin_dir = HAP_BIN_DIR;
  o.echo_output = false;
  o.encoder_args = o.prefill_args = o.decode_args = {"--threads", "1"};
  auto pipeline = sdk::LocalPipeline::Start(o);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  const std::string decode = (*pipeline)->address(sdk::Service::kDecode);
  TcpProxy proxy(std::stoi(decode.substr(decode.rfind(':') + 1)));
  auto prefill = sdk::ChildProcess::Spawn(
      {std::string(HAP_BIN_DIR) + "/hap-prefill", "--host", "127.0.0.1", "--port", "0",
       "--model", model, "--threads", "1", "--encoder-addr",
       (*pipeline)->address(sdk::Service::kEncoder), "--decode-addr",
       absl::StrCat("127.0.0.1:", proxy.port()), "--decode-poll-ms", "0"},
      "");
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  auto line = (*prefill)->WaitForLine(
      [](const std::string& l) { return sdk::ParseListeningPort(l) > 0; }, milliseconds(60000));
  ASSERT_TRUE(line.ok()) << line.status();
  const std::string front = absl::StrCat("127.0.0.1:", sdk::ParseListeningPort(*line));
  ASSERT_TRUE(sdk::WaitUntilServing(front, milliseconds(60000)).ok());
  auto client = sdk::Client::Connect(front);
  ASSERT_TRUE(client.ok());
  const std::string image = ReadBytes(TestImagePath());
  Ask ask;
  ask.max_new_tokens = 8;
  sdk::StreamOptions so;
  so.timeout = milliseconds(10000);

  // Served through the proxy; its stats say how many KV bytes a transfer carries.
  auto whole = (*client)->Generate(ToRequest(ask, image), so);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const int64_t kv_bytes = whole->stats.kv_bytes_received();
  ASSERT_GT(kv_bytes, 4096);

  // Cut the next transfer halfway through its KV bytes; a client that does not retry sees it.
  sdk::ClientOptions no_retry;
  no_retry.retry.max_attempts = 1;
  auto once = sdk::Client::Connect(front, no_retry);
  ASSERT_TRUE(once.ok());
  proxy.CutAfter(kv_bytes / 2);
  const auto t0 = std::chrono::steady_clock::now();
  auto cut = (*once)->Generate(ToRequest(ask, image), so);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(proxy.cuts(), 1);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kUnavailable) << cut.status();
  EXPECT_NE(cut.status().message().find("decode"), std::string::npos) << cut.status();
  EXPECT_LT(ms, 10000);
  std::printf("[ fault ] KV stream cut after %lld of %lld bytes: client saw %s after %.0f ms\n",
              static_cast<long long>(kv_bytes / 2), static_cast<long long>(kv_bytes),
              absl::StatusCodeToString(cut.status().code()).c_str(), ms);
  // Neither side keeps the cache, its lease or its blocks.
  EXPECT_TRUE(WaitUntil([&] { return Idle(front); }, milliseconds(3000)).has_value());
  EXPECT_TRUE(WaitUntil([&] { return Idle(decode); }, milliseconds(3000)).has_value());
  // The front door reconnects through the proxy and serves.
  auto again = (*client)->Generate(ToRequest(ask, image), so);
  EXPECT_TRUE(again.ok()) << again.status();
  // The SDK's retry (UNAVAILABLE before the first token) rides out a cut transfer.
  proxy.CutAfter(kv_bytes / 2);
  auto retried = (*client)->Generate(ToRequest(ask, image), so);
  EXPECT_EQ(proxy.cuts(), 2);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->attempts, 2);
  EXPECT_EQ(Ids(retried->stats.token_ids()), Ids(whole->stats.token_ids()));
  (*prefill)->Terminate(milliseconds(10000));
}

}  // namespace
}  // namespace hap::e2e
