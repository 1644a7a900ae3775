#include "telemetry/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace hap::telemetry {
namespace {

using Clock = std::chrono::steady_clock;

// Waits for `events` on fd in short slices so a cancel is noticed; false on deadline/cancel.
absl::Status WaitFd(int fd, short events, Clock::time_point deadline,
                    const std::atomic<bool>* cancelled) {
  for (;;) {
    if (cancelled != nullptr && cancelled->load()) return absl::CancelledError("export cancelled");
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return absl::DeadlineExceededError("HTTP request timed out");
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 50)));
    if (r > 0) return absl::OkStatus();
    if (r < 0 && errno != EINTR) return absl::UnavailableError(std::strerror(errno));
  }
}

}  // namespace

absl::StatusOr<HttpUrl> ParseHttpUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  const std::string original(url);
  if (!absl::StartsWithIgnoreCase(original, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OTLP/HTTP endpoint '", original, "' must start with http:// (TLS is not supported here)"));
  }
  url.remove_prefix(kScheme.size());
  HttpUrl out;
  const size_t slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  if (slash != std::string_view::npos) out.path = std::string(url.substr(slash));
  if (!authority.empty() && authority.front() == '[') {  // [v6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return absl::InvalidArgumentError("bad IPv6 address");
    out.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    if (!authority.empty() && authority.front() != ':') {
      return absl::InvalidArgumentError(absl::StrCat("bad endpoint '", original, "'"));
    }
  } else {
    const size_t colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    authority = colon == std::string_view::npos ? std::string_view() : authority.substr(colon);
  }
  if (!authority.empty()) {  // ":port"
    if (!absl::SimpleAtoi(std::string(authority.substr(1)), &out.port) || out.port <= 0 ||
        out.port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("bad port in endpoint '", original, "'"));
    }
  }
  if (out.host.empty()) return absl::InvalidArgumentError("endpoint has no host");
  return out;
}

absl::StatusOr<HttpResult> HttpRequestTo(
    std::string_view method, const HttpUrl& url, std::string_view content_type,
    std::string_view body, const std::vector<std::pair<std::string, std::string>>& headers,
    std::chrono::milliseconds timeout, const std::atomic<bool>* cancelled) {
  const auto deadline = Clock::now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(url.port);
  if (const int gai = getaddrinfo(url.host.c_str(), port.c_str(), &hints, &res); gai != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", url.host, ": ", gai_strerror(gai)));
  }
  absl::Cleanup free_res = [res] { freeaddrinfo(res); };
  int fd = -1;
  absl::Status last = absl::UnavailableError("no address");
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = absl::UnavailableError(
          absl::StrCat("connect ", url.host, ":", url.port, ": ", std::strerror(errno)));
      close(fd);
      fd = -1;
      continue;
    }
    if (absl::Status s = WaitFd(fd, POLLOUT, deadline, cancelled); !s.ok()) {
      close(fd);
      return s;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      last = absl::UnavailableError(
          absl::StrCat("connect ", url.host, ":", url.port, ": ", std::strerror(err)));
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0) return last;
  absl::Cleanup close_fd = [fd] { close(fd); };

  std::string request = absl::StrCat(
      std::string(method), " ", url.path, " HTTP/1.1\r\nHost: ", url.host, ":", url.port,
      "\r\nContent-Type: ", std::string(content_type), "\r\nContent-Length: ", body.size(),
      "\r\nConnection: close\r\nUser-Agent: hap-telemetry\r\n");
  for (const auto& [k, v] : headers) absl::StrAppend(&request, k, ": ", v, "\r\n");
  request += "\r\n";
  request.append(body);
  size_t off = 0;
  while (off < request.size()) {
    if (absl::Status s = WaitFd(fd, POLLOUT, deadline, cancelled); !s.ok()) return s;
    const ssize_t n = send(fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    off += static_cast<size_t>(n);
  }
  // Read the whole response (the server closes the connection or sends Content-Length).
  std::string response;
  char chunk[8192];
  for (;;) {
    const size_t head_end = response.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      const std::string head = absl::AsciiStrToLower(response.substr(0, head_end));
      const size_t cl = head.find("content-length:");
      size_t length = 0;
      if (cl != std::string::npos &&
          absl::SimpleAtoi(
              absl::StripAsciiWhitespace(head.substr(cl + 15, head.find("\r\n", cl) - cl - 15)),
              &length) &&
          response.size() >= head_end + 4 + length) {
        break;
      }
    }
    if (absl::Status s = WaitFd(fd, POLLIN, deadline, cancelled); !s.ok()) return s;
    const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    if (n == 0) break;
    response.append(chunk, static_cast<size_t>(n));
  }
  HttpResult r;
  // "HTTP/1.1 200 OK"
  const size_t sp = response.find(' ');
  if (sp == std::string::npos || !absl::SimpleAtoi(response.substr(sp + 1, 3), &r.status)) {
    return absl::UnavailableError("malformed HTTP response");
  }
  const size_t head_end = response.find("\r\n\r\n");
  if (head_end != std::string::npos) r.body = response.substr(head_end + 4);
  return r;
}

}  // namespace hap::telemetry
