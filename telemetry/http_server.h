// A tiny HTTP/1.1 server for /metrics (and, in tests, an OTLP/HTTP collector): one thread,
// one connection at a time, "Connection: close", bounded request size and read time. Enough
// for a Prometheus scrape every few seconds; not a general web server.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/status/status.h"

namespace hap::telemetry {

struct HttpRequest {
  std::string method;                          // "GET"
  std::string path;                            // "/metrics" (without the query)
  std::string query;                           // after '?', "" when none
  std::map<std::string, std::string> headers;  // names lowercased
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  HttpServer() = default;
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves `path` (exact match) with `handler`; call before Start.
  void Handle(const std::string& path, Handler handler);

  // Listens on host:port (port 0 = a free one; see port()) and starts the serving thread.
  absl::Status Start(const std::string& host, int port);
  int port() const { return port_; }
  void Stop();

  static constexpr size_t kMaxRequestBytes = 32 << 20;

 private:
  void Loop();
  void Serve(int fd);

  std::map<std::string, Handler> handlers_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace hap::telemetry
