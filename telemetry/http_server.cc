#include "telemetry/http_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace hap::telemetry {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kReadTimeout = std::chrono::seconds(5);

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

// Reads into `buf` until `done(buf)` or the deadline; false on timeout, error or EOF first.
bool ReadUntil(int fd, std::string* buf, Clock::time_point deadline,
               const std::function<bool(const std::string&)>& done) {
  char chunk[16384];
  while (!done(*buf)) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buf->append(chunk, static_cast<size_t>(n));
    if (buf->size() > HttpServer::kMaxRequestBytes) return false;
  }
  return true;
}

void WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

void Respond(int fd, const HttpResponse& r) {
  WriteAll(fd, absl::StrCat("HTTP/1.1 ", r.status, " ", Reason(r.status), "\r\nContent-Type: ",
                            r.content_type, "\r\nContent-Length: ", r.body.size(),
                            "\r\nConnection: close\r\n\r\n", r.body));
}

}  // namespace

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(const std::string& path, Handler handler) {
  handlers_[path] = std::move(handler);
}

absl::Status HttpServer::Start(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_str = std::to_string(port);
  const int gai =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), port_str.c_str(), &hints, &res);
  if (gai != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address ", host, ":", port, ": ", gai_strerror(gai)));
  }
  std::string error = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 16) == 0) {
      listen_fd_ = fd;
      break;
    }
    error = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(res);
  if (listen_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for HTTP on ", host, ":", port, ": ", error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

void HttpServer::Loop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    const int r = poll(&p, 1, 100);  // wakes to notice Stop()
    if (r <= 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Serve(fd);
    close(fd);
  }
}

void HttpServer::Serve(int fd) {
  const auto deadline = Clock::now() + kReadTimeout;
  std::string buf;
  if (!ReadUntil(fd, &buf, deadline,
                 [](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; })) {
    if (buf.size() > kMaxRequestBytes) Respond(fd, {413, "text/plain", "request too large\n"});
    return;
  }
  const size_t head_end = buf.find("\r\n\r\n");
  HttpRequest req;
  size_t line_end = buf.find("\r\n");
  {
    const std::string line = buf.substr(0, line_end);
    const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
    if (sp1 == std::string::npos || sp2 == sp1 || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
      Respond(fd, {400, "text/plain", "malformed request line\n"});
      return;
    }
    req.method = line.substr(0, sp1);
    std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    const size_t q = target.find('?');
    if (q != std::string::npos) {
      req.query = target.substr(q + 1);
      target.resize(q);
    }
    req.path = target;
  }
  while (line_end < head_end) {
    const size_t start = line_end + 2;
    line_end = buf.find("\r\n", start);
    const std::string header = buf.substr(start, line_end - start);
    const size_t colon = header.find(':');
    if (colon == std::string::npos) continue;
    req.headers[absl::AsciiStrToLower(header.substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(header.substr(colon + 1)));
  }
  size_t content_length = 0;
  if (auto it = req.headers.find("content-length"); it != req.headers.end()) {
    if (!absl::SimpleAtoi(it->second, &content_length) || content_length > kMaxRequestBytes) {
      Respond(fd, {413, "text/plain", "bad or too large Content-Length\n"});
      return;
    }
  }
  const size_t body_start = head_end + 4;
  if (!ReadUntil(fd, &buf, deadline,
                 [&](const std::string& b) { return b.size() >= body_start + content_length; })) {
    return;
  }
  req.body = buf.substr(body_start, content_length);
  auto handler = handlers_.find(req.path);
  if (handler == handlers_.end()) {
    Respond(fd, {404, "text/plain", "not found\n"});
    return;
  }
  Respond(fd, handler->second(req));
}

}  // namespace hap::telemetry
