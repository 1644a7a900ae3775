// The HTTP server of /metrics (and, in tests, of an OTLP/HTTP collector): a path → handler table
// over cpp-httplib, the library the OpenAI API serves with too, on two threads, with a bounded
// request size (larger bodies get 413) and read time. Unknown paths get 404.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"

namespace httplib {
class Server;
}  // namespace httplib

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

  HttpServer();
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves GET and POST of `path` (exact match) with `handler`; call before Start.
  void Handle(const std::string& path, Handler handler);

  // Listens on host:port (port 0 = a free one; see port()) and starts serving.
  absl::Status Start(const std::string& host, int port);
  int port() const { return port_; }
  // Stops serving and waits for the requests in progress. Start may follow.
  void Stop();

  static constexpr size_t kMaxRequestBytes = 32 << 20;

 private:
  std::map<std::string, Handler> handlers_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread thread_;  // runs the server's accept loop
};

}  // namespace hap::telemetry
