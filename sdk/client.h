// The C++ client of HAP serve: streaming Generate with a callback per text delta, deadlines,
// retries with exponential backoff (on UNAVAILABLE, and only before the first token arrived),
// TLS or insecure channels, a bearer token, and the health and debug calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "hap/v1/debug.grpc.pb.h"
#include "hap/v1/generate.grpc.pb.h"
#include "rpc/credentials.h"

namespace hap::sdk {

using TlsOptions = rpc::TlsOptions;

struct RetryPolicy {
  int max_attempts = 4;  // 1 = no retry
  int64_t initial_backoff_ms = 100;
  double multiplier = 2.0;
  int64_t max_backoff_ms = 2000;
};

struct ClientOptions {
  TlsOptions tls;
  RetryPolicy retry;
  int max_receive_message_bytes = 64 << 20;
  // A front door with authentication (services/README.md): sent as `authorization: Bearer
  // <token>` metadata on every call. Over a plaintext channel anyone who can see the traffic can
  // read it and use it: beyond loopback or a network you trust, use TLS. Empty = none.
  std::string bearer_token;
};

// A bearer token from a file. Without `client_id` the file holds the token alone (the first line
// that is neither blank nor a '#' comment, whitespace trimmed); with it, the file is a server's
// tokens file (`client-id:token` lines) and the token is that client's. Errors name the file and
// never hold a token.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path,
                                          const std::string& client_id = "");

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address,
                                                           const ClientOptions& options);

// Cancels a Generate call from any thread (before it starts, too).
class CancelToken {
 public:
  void Cancel();
  bool cancelled() const;

 private:
  friend class Client;
  void Attach(grpc::ClientContext* ctx);
  void Detach();
  mutable std::mutex mu_;
  grpc::ClientContext* ctx_ = nullptr;
  bool cancelled_ = false;
};

struct StreamOptions {
  // The whole call, retries included, must finish within this (unset = no deadline).
  std::optional<std::chrono::milliseconds> timeout;
  // Called for every delta as it arrives; returning false cancels the call.
  std::function<bool(const hap::v1::TextDelta&)> on_delta;
  std::shared_ptr<CancelToken> cancel;
  // Extra request metadata (lowercase keys), e.g. {"traceparent", "00-<trace>-<span>-01"} to
  // make the call part of the caller's trace.
  std::vector<std::pair<std::string, std::string>> metadata;
};

struct GenerateResult {
  hap::v1::GenerateStats stats;  // the server's final message
  std::string text;              // the streamed deltas, concatenated
  std::vector<int32_t> streamed_token_ids;
  int attempts = 0;
  double ttft_ms = 0;                  // call start → first delta, as the client saw it
  std::vector<double> token_times_ms;  // call start → each delta that carried a token
};

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& address,
                                                         const ClientOptions& options = {});

  // The status carries the server's code: INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE,
  // DEADLINE_EXCEEDED, CANCELLED (on_delta returned false or the token was cancelled), ...
  absl::StatusOr<GenerateResult> Generate(const hap::v1::GenerateRequest& request,
                                          const StreamOptions& options = {});

  // hap.v1.Debug/GetState (waits for the connection up to `timeout`).
  absl::StatusOr<hap::v1::ServerState> GetState(
      std::chrono::milliseconds timeout = std::chrono::seconds(2));
  // grpc.health.v1.Health/Check for the whole server: true when SERVING.
  absl::StatusOr<bool> IsServing(std::chrono::milliseconds timeout = std::chrono::seconds(2));

  const std::string& address() const { return address_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }

 private:
  Client(std::string address, std::shared_ptr<grpc::Channel> channel, ClientOptions options);
  // One attempt; `*streamed` tells whether any delta arrived.
  // The error for an UNIMPLEMENTED answer to Generate: not the front door, or a request the
  // front door could not parse.
  absl::Status ExplainUnimplemented(const grpc::Status& st,
                                    std::optional<std::chrono::system_clock::time_point> deadline);
  absl::Status Attempt(const hap::v1::GenerateRequest& request, const StreamOptions& options,
                       std::optional<std::chrono::system_clock::time_point> deadline,
                       std::chrono::steady_clock::time_point t0, GenerateResult* result,
                       bool* streamed);

  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  ClientOptions options_;
  std::unique_ptr<hap::v1::Generation::Stub> generation_;
  std::unique_ptr<hap::v1::Debug::Stub> debug_;

  // Adds the bearer token, if any, to a call.
  void Authorize(grpc::ClientContext* ctx) const;
};

// Polls the health service until SERVING (DeadlineExceeded with the last status otherwise).
absl::Status WaitUntilServing(const std::string& address, std::chrono::milliseconds timeout,
                              const ClientOptions& options = {});

}  // namespace hap::sdk
