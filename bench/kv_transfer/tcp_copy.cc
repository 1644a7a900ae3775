#include "bench/kv_transfer/tcp_copy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace hap::bench {
namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

absl::StatusOr<double> TcpCopySeconds(const std::vector<std::string_view>& parts) {
  size_t total = 0;
  for (std::string_view p : parts) total += p.size();
  Fd listener;
  listener.fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listener.fd < 0 || bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener.fd, 1) != 0 ||
      getsockname(listener.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::UnavailableError("cannot listen on loopback");
  }
  std::thread receiver([&] {
    Fd conn;
    conn.fd = accept(listener.fd, nullptr, nullptr);
    if (conn.fd < 0) return;
    std::vector<char> buf(1 << 20);
    size_t got = 0;
    while (got < total) {
      const ssize_t n = read(conn.fd, buf.data(), buf.size());
      if (n <= 0) return;
      got += n;
    }
    const char ack = 1;
    [[maybe_unused]] ssize_t w = write(conn.fd, &ack, 1);
  });
  Fd sender;
  sender.fd = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(sender.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(sender.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    receiver.join();
    return absl::UnavailableError("cannot connect on loopback");
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (std::string_view p : parts) {
    size_t sent = 0;
    while (sent < p.size()) {
      const ssize_t n = write(sender.fd, p.data() + sent, p.size() - sent);
      if (n <= 0) {
        receiver.join();
        return absl::UnavailableError("write failed");
      }
      sent += n;
    }
  }
  char ack = 0;
  const ssize_t n = read(sender.fd, &ack, 1);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  receiver.join();
  if (n != 1) return absl::UnavailableError("no acknowledgement");
  return s;
}

}  // namespace hap::bench
