#include "telemetry/http_server.h"

#include <httplib.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace hap::telemetry {
namespace {

constexpr time_t kReadTimeoutSeconds = 5;
constexpr size_t kServingThreads = 2;

// The request as handlers see it: the path without the query, header names lowercased.
HttpRequest FromHttplib(const httplib::Request& r) {
  HttpRequest req;
  req.method = r.method;
  req.path = r.path;
  if (const size_t q = r.target.find('?'); q != std::string::npos)
    req.query = r.target.substr(q + 1);
  for (const auto& [name, value] : r.headers) req.headers[absl::AsciiStrToLower(name)] = value;
  req.body = r.body;
  return req;
}

}  // namespace

HttpServer::HttpServer() = default;
HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(const std::string& path, Handler handler) {
  handlers_[path] = std::move(handler);
}

absl::Status HttpServer::Start(const std::string& host, int port) {
  server_ = std::make_unique<httplib::Server>();
  server_->new_task_queue = [] { return new httplib::ThreadPool(kServingThreads); };
  server_->set_read_timeout(kReadTimeoutSeconds, 0);
  server_->set_payload_max_length(kMaxRequestBytes);
  for (const auto& [path, handler] : handlers_) {
    const auto serve = [handler = handler](const httplib::Request& req, httplib::Response& res) {
      const HttpResponse out = handler(FromHttplib(req));
      res.status = out.status;
      res.set_content(out.body, out.content_type.c_str());
    };
    server_->Get(path, serve);
    server_->Post(path, serve);
  }
  const std::string bind_host = host.empty() ? "0.0.0.0" : host;
  const int bound = port == 0 ? server_->bind_to_any_port(bind_host)
                              : (server_->bind_to_port(bind_host, port) ? port : -1);
  if (bound <= 0) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", host, ":", port));
  }
  port_ = bound;
  thread_ = std::thread([server = server_.get()] { server->listen_after_bind(); });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace hap::telemetry
