// The OpenAI-compatible HTTP API of the front door (docs/openai.md): POST /v1/chat/completions
// (streamed as Server-Sent Events or whole) and GET /v1/models, served with cpp-httplib. Each
// request becomes one hap.v1.Generation/Generate call on `front_door` (the process's own server,
// reached in process), so admission, limits, tracing, metrics and cancellation are the gRPC
// API's; a client that disconnects cancels its call. With authentication on, the request's
// `Authorization` header goes along as the call's `authorization` metadata, so the front door's
// own check (and its per-client limit) applies; GET /v1/models is checked here with the same
// TokenAuth.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "hap/v1/generate.grpc.pb.h"
#include "services/auth/token_auth.h"
#include "services/openai/chat_api.h"

namespace httplib {
class Server;
}

namespace hap::svc::openai {

struct OpenAiServerOptions {
  std::string host = "0.0.0.0";
  int port = 0;                    // 0 = a free port (see port())
  int threads = 16;                // connections served at once (each stream holds one)
  ChatOptions chat;                // model id, image limit, template, defaults
  const TokenAuth* auth = nullptr;  // non-null: every request needs a bearer token it accepts
};

class OpenAiServer {
 public:
  OpenAiServer(OpenAiServerOptions options, std::shared_ptr<grpc::Channel> front_door);
  ~OpenAiServer();  // Stop()
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // Binds host:port and starts serving on a thread; Unavailable when the port is taken.
  absl::Status Start();
  int port() const { return port_; }
  // Stops accepting and waits for the serving threads; streams still open end.
  void Stop();

 private:
  // `request` and `response` are httplib's.
  void HandleChat(const void* request, void* response);
  // False (with the 401 written) when authentication is on and the request has no valid token.
  bool Authorized(const void* request, void* response) const;

  OpenAiServerOptions options_;
  std::unique_ptr<hap::v1::Generation::Stub> stub_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace hap::svc::openai
