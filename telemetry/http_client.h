// A minimal blocking HTTP/1.1 client for OTLP/HTTP: one POST per connection over plain TCP,
// with an overall deadline and a cancel flag checked while waiting. No TLS (use a local
// collector, or the gRPC exporter with https).
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace hap::telemetry {

struct HttpUrl {
  std::string host;
  int port = 80;
  std::string path = "/";
};
// "http://host[:port][/path]"; InvalidArgument for https or anything unparsable.
absl::StatusOr<HttpUrl> ParseHttpUrl(std::string_view url);

struct HttpResult {
  int status = 0;
  std::string body;
};

// One request: `method` (POST, GET) with `body` (sent with Content-Length even when empty).
absl::StatusOr<HttpResult> HttpRequestTo(
    std::string_view method, const HttpUrl& url, std::string_view content_type,
    std::string_view body, const std::vector<std::pair<std::string, std::string>>& headers,
    std::chrono::milliseconds timeout, const std::atomic<bool>* cancelled);

inline absl::StatusOr<HttpResult> HttpPost(
    const HttpUrl& url, std::string_view content_type, std::string_view body,
    const std::vector<std::pair<std::string, std::string>>& headers,
    std::chrono::milliseconds timeout, const std::atomic<bool>* cancelled) {
  return HttpRequestTo("POST", url, content_type, body, headers, timeout, cancelled);
}

inline absl::StatusOr<HttpResult> HttpGet(const HttpUrl& url, std::chrono::milliseconds timeout) {
  return HttpRequestTo("GET", url, "text/plain", "", {}, timeout, nullptr);
}

}  // namespace hap::telemetry
