#include "sdk/client.h"

#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace hap::sdk {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// What an HTTP header and gRPC metadata can carry: printable ASCII without spaces.
bool ValidToken(absl::string_view token) {
  if (token.empty()) return false;
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const std::string& client_id) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read the token file '", path, "'"));
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  int line_no = 0;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const absl::string_view line =
        absl::StripAsciiWhitespace(absl::string_view(text).substr(at, end - at));
    at = end + 1;
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    absl::string_view token = line;
    if (!client_id.empty()) {
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos ||
          absl::StripAsciiWhitespace(line.substr(0, colon)) != client_id) {
        continue;
      }
      token = absl::StripAsciiWhitespace(line.substr(colon + 1));
    }
    if (!ValidToken(token)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no,
                       ": a token is printable ASCII without spaces (what an HTTP header "
                       "carries)"));
    }
    return std::string(token);
  }
  if (!client_id.empty()) {
    return absl::NotFoundError(
        absl::StrCat(path, " has no line 'client-id:token' for client '", client_id, "'"));
  }
  return absl::InvalidArgumentError(absl::StrCat(path, " holds no token"));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address,
                                                           const ClientOptions& options) {
  auto creds = rpc::MakeCredentials(options.tls);
  if (!creds.ok()) return creds.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  args.SetMaxSendMessageSize(-1);
  // No GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC also takes it as the least time one connection
  // attempt gets, and 100 ms is too short for a handshake on a loaded machine (a burst of
  // clients failed with "tcp handshaker shutdown"). The attempt keeps gRPC's 20 s.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  if (!options.tls.server_name_override.empty()) {
    args.SetSslTargetNameOverride(options.tls.server_name_override);
  }
  return grpc::CreateCustomChannel(address, *creds, args);
}

void CancelToken::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (ctx_ != nullptr) ctx_->TryCancel();
}

bool CancelToken::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void CancelToken::Attach(grpc::ClientContext* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  ctx_ = ctx;
  if (cancelled_) ctx->TryCancel();
}

void CancelToken::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  ctx_ = nullptr;
}

Client::Client(std::string address, std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : address_(std::move(address)), channel_(std::move(channel)), options_(std::move(options)) {
  generation_ = hap::v1::Generation::NewStub(channel_);
  debug_ = hap::v1::Debug::NewStub(channel_);
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& address,
                                                        const ClientOptions& options) {
  if (address.empty()) return absl::InvalidArgumentError("server address is empty");
  if (!options.bearer_token.empty() && !ValidToken(options.bearer_token)) {
    return absl::InvalidArgumentError(
        "the bearer token must be printable ASCII without spaces (what an HTTP header carries)");
  }
  auto channel = MakeChannel(address, options);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<Client>(new Client(address, *channel, options));
}

void Client::Authorize(grpc::ClientContext* ctx) const {
  if (!options_.bearer_token.empty()) {
    ctx->AddMetadata("authorization", absl::StrCat("Bearer ", options_.bearer_token));
  }
}

absl::Status Client::Attempt(const hap::v1::GenerateRequest& request, const StreamOptions& options,
                             std::optional<std::chrono::system_clock::time_point> deadline,
                             Clock::time_point t0, GenerateResult* result, bool* streamed) {
  grpc::ClientContext ctx;
  if (deadline) ctx.set_deadline(*deadline);
  Authorize(&ctx);
  for (const auto& [key, value] : options.metadata) ctx.AddMetadata(key, value);
  if (options.cancel) options.cancel->Attach(&ctx);
  std::unique_ptr<grpc::ClientReader<hap::v1::GenerateResponse>> reader =
      generation_->Generate(&ctx, request);
  hap::v1::GenerateResponse msg;
  bool cancelled_by_callback = false, got_stats = false;
  while (reader->Read(&msg)) {
    if (msg.has_delta()) {
      const hap::v1::TextDelta& d = msg.delta();
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (!*streamed) result->ttft_ms = ms;
      *streamed = true;
      result->text += d.text();
      for (int32_t id : d.token_ids()) {
        result->streamed_token_ids.push_back(id);
        result->token_times_ms.push_back(ms);
      }
      if (options.on_delta && !options.on_delta(d)) {
        cancelled_by_callback = true;
        ctx.TryCancel();
        break;
      }
    } else if (msg.has_stats()) {
      result->stats = std::move(*msg.mutable_stats());
      got_stats = true;
    }
  }
  const grpc::Status st = reader->Finish();
  if (options.cancel) options.cancel->Detach();
  if (cancelled_by_callback) return absl::CancelledError("cancelled by the delta callback");
  if (st.error_code() == grpc::StatusCode::UNIMPLEMENTED) return ExplainUnimplemented(st, deadline);
  if (!st.ok()) return FromGrpc(st);
  if (!got_stats) return absl::InternalError("the stream ended without its stats message");
  return absl::OkStatus();
}

absl::Status Client::ExplainUnimplemented(
    const grpc::Status& st, std::optional<std::chrono::system_clock::time_point> deadline) {
  // gRPC answers UNIMPLEMENTED, often with no message, both when the server has no Generation
  // service and when the front door could not parse the request. The health service tells which.
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  const auto soon = std::chrono::system_clock::now() + std::chrono::seconds(2);
  ctx.set_deadline(deadline ? std::min(*deadline, soon) : soon);
  Authorize(&ctx);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(hap::v1::Generation::service_full_name());
  grpc::health::v1::HealthCheckResponse resp;
  const grpc::Status health = stub->Check(&ctx, req, &resp);
  const std::string detail =
      st.error_message().empty() ? "" : absl::StrCat(" (", st.error_message(), ")");
  if (health.ok()) {
    return absl::UnimplementedError(absl::StrCat(
        "the front door at ", address_, " could not parse the request", detail,
        ": a string field (request_id, prompt, raw_prompt, stop) is probably not valid UTF-8"));
  }
  return absl::UnimplementedError(absl::StrCat(
      "the server at ", address_, " does not serve hap.v1.Generation/Generate", detail,
      ": it is not a HAP serve front door (hap-encoder or hap-decode?). Point the client at "
      "hap-prefill; `hapctl up` prints its address"));
}

absl::StatusOr<GenerateResult> Client::Generate(const hap::v1::GenerateRequest& request,
                                                const StreamOptions& options) {
  const auto t0 = Clock::now();
  std::optional<std::chrono::system_clock::time_point> deadline;
  if (options.timeout) deadline = std::chrono::system_clock::now() + *options.timeout;
  GenerateResult result;
  int64_t backoff_ms = options_.retry.initial_backoff_ms;
  for (int attempt = 1;; ++attempt) {
    result = GenerateResult();
    result.attempts = attempt;
    bool streamed = false;
    absl::Status s = Attempt(request, options, deadline, t0, &result, &streamed);
    if (s.ok()) return result;
    // Only a server that could not be reached, and only before any token: a retry then cannot
    // duplicate output.
    const bool retryable = s.code() == absl::StatusCode::kUnavailable && !streamed &&
                           attempt < options_.retry.max_attempts &&
                           !(options.cancel && options.cancel->cancelled());
    if (!retryable) return s;
    auto wake = std::chrono::system_clock::now() + std::chrono::milliseconds(backoff_ms);
    if (deadline && wake >= *deadline) return s;
    std::this_thread::sleep_until(wake);
    backoff_ms = std::min<int64_t>(static_cast<int64_t>(backoff_ms * options_.retry.multiplier),
                                   options_.retry.max_backoff_ms);
  }
}

absl::StatusOr<hap::v1::ServerState> Client::GetState(std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  ctx.set_wait_for_ready(true);  // rides out a reconnect instead of failing at once
  Authorize(&ctx);
  hap::v1::ServerState state;
  const grpc::Status st = debug_->GetState(&ctx, hap::v1::GetStateRequest(), &state);
  if (!st.ok()) return FromGrpc(st);
  return state;
}

absl::StatusOr<bool> Client::IsServing(std::chrono::milliseconds timeout) {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  Authorize(&ctx);
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  const grpc::Status st = stub->Check(&ctx, req, &resp);
  if (!st.ok()) return FromGrpc(st);
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

absl::Status WaitUntilServing(const std::string& address, std::chrono::milliseconds timeout,
                              const ClientOptions& options) {
  auto client = Client::Connect(address, options);
  if (!client.ok()) return client.status();
  const auto end = Clock::now() + timeout;
  absl::Status last = absl::UnavailableError("no answer yet");
  while (Clock::now() < end) {
    absl::StatusOr<bool> serving = (*client)->IsServing(std::chrono::milliseconds(500));
    if (serving.ok() && *serving) return absl::OkStatus();
    last = serving.ok() ? absl::UnavailableError("NOT_SERVING") : serving.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat(address, " did not report SERVING within ",
                                                  timeout.count(), " ms (last: ", last.ToString(),
                                                  ")"));
}

}  // namespace hap::sdk
