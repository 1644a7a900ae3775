#include "services/openai/openai_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/server/status.h"

namespace hap::svc::openai {
namespace {

using nlohmann::json;

constexpr const char* kJson = "application/json";

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void SendError(const ApiError& e, httplib::Response* res) {
  res->status = e.http_status;
  if (e.http_status == 401) res->set_header("WWW-Authenticate", "Bearer");  // RFC 6750
  res->set_content(Dump(e.Body()), kJson);
}

std::string NewCompletionId() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("chatcmpl-%016x%08x", rng(), static_cast<uint32_t>(rng()));
}

// One Generate call on the front door, kept alive for as long as its HTTP response streams.
struct Call {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<hap::v1::GenerateResponse>> reader;
  bool finished = false;
  grpc::Status status;

  // Ends the call (cancelling it first when `cancel`), reading what is left.
  const grpc::Status& Finish(bool cancel) {
    if (finished) return status;
    if (cancel) ctx.TryCancel();
    hap::v1::GenerateResponse drain;
    while (cancel && reader->Read(&drain)) {
    }
    status = reader->Finish();
    finished = true;
    return status;
  }
};

}  // namespace

OpenAiServer::OpenAiServer(OpenAiServerOptions options, std::shared_ptr<grpc::Channel> front_door)
    : options_(std::move(options)), stub_(hap::v1::Generation::NewStub(front_door)) {}

OpenAiServer::~OpenAiServer() { Stop(); }

absl::Status OpenAiServer::Start() {
  http_ = std::make_unique<httplib::Server>();
  const int threads = options_.threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // The body carries the image as base64 (4/3 of its bytes) beside the conversation.
  http_->set_payload_max_length(static_cast<size_t>(options_.chat.max_image_bytes) / 3 * 4 +
                                (1 << 20));
  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleChat(&req, &res);
  });
  http_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(&req, &res)) return;
    const json models = {
        {"object", "list"},
        {"data", json::array({{{"id", options_.chat.model_id},
                               {"object", "model"},
                               {"created", 0},
                               {"owned_by", "hap-serve"}}})}};
    res.set_content(Dump(models), kJson);
  });
  // Errors httplib answers itself (no such route, a body over the limit) in OpenAI's shape too.
  http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e;
    e.http_status = res.status;
    e.type = "invalid_request_error";
    if (res.status == 404) {
      e.message = absl::StrCat("no such endpoint: ", req.method, " ", req.path,
                               " (POST /v1/chat/completions, GET /v1/models)");
    } else if (res.status == 413) {
      e.message = absl::StrCat("the request body is larger than ",
                               options_.chat.max_image_bytes / 3 * 4 + (1 << 20),
                               " bytes (an image of at most ", options_.chat.max_image_bytes,
                               " bytes, --max-image-bytes, as base64, and the conversation)");
    } else {
      e.message = absl::StrCat("HTTP ", res.status);
    }
    SendError(e, &res);
  });
  port_ = options_.port == 0 ? http_->bind_to_any_port(options_.host)
                             : (http_->bind_to_port(options_.host, options_.port)
                                    ? options_.port
                                    : -1);
  if (port_ <= 0) {
    http_.reset();
    return absl::UnavailableError(
        absl::StrCat("OpenAI API: cannot listen on ", options_.host, ":", options_.port));
  }
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  return absl::OkStatus();
}

void OpenAiServer::Stop() {
  if (http_ == nullptr) return;
  http_->stop();
  if (thread_.joinable()) thread_.join();
  http_.reset();
}

bool OpenAiServer::Authorized(const void* request, void* response) const {
  if (options_.auth == nullptr) return true;
  const httplib::Request& req = *static_cast<const httplib::Request*>(request);
  // Two Authorization headers are refused like a bad one (no guessing which counts).
  const std::string value =
      req.get_header_value_count("Authorization") == 1 ? req.get_header_value("Authorization") : "";
  absl::StatusOr<std::string> client =
      options_.auth->Authenticate(value, absl::StrCat("http:", req.remote_addr));
  if (client.ok()) return true;
  SendError(CallError(client.status()), static_cast<httplib::Response*>(response));
  return false;
}

void OpenAiServer::HandleChat(const void* request, void* response) {
  const httplib::Request& req = *static_cast<const httplib::Request*>(request);
  httplib::Response& res = *static_cast<httplib::Response*>(response);
  // The token before the body is looked at: a caller without one learns nothing.
  if (!Authorized(&req, &res)) return;
  absl::StatusOr<ChatRequest> parsed = ParseChatRequest(req.body, options_.chat);
  if (!parsed.ok()) return SendError(RequestError(parsed.status()), &res);
  ChatRequest& chat = *parsed;
  const std::string id = NewCompletionId();
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const std::string model = options_.chat.model_id;
  chat.generate.set_request_id(id);
  const std::string traceparent = req.get_header_value("traceparent");
  const std::string tracestate = req.get_header_value("tracestate");

  auto call = std::make_shared<Call>();
  if (chat.timeout_ms) {
    call->ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(*chat.timeout_ms));
  }
  // The caller's trace context: the front door's span joins the caller's trace.
  if (!traceparent.empty()) call->ctx.AddMetadata("traceparent", traceparent);
  if (!tracestate.empty()) call->ctx.AddMetadata("tracestate", tracestate);
  // The front door checks the token again (it may have been revoked since) and counts the
  // request against its client's limit: one check for both APIs.
  if (options_.auth != nullptr) {
    // Accepted above, so "<scheme> <token>": sent as "Bearer <token>", without the whitespace
    // HTTP allows and gRPC metadata does not.
    const std::string value = req.get_header_value("Authorization");
    call->ctx.AddMetadata(
        "authorization",
        absl::StrCat("Bearer ", absl::StripAsciiWhitespace(absl::string_view(value).substr(7))));
  }
  call->reader = stub_->Generate(&call->ctx, chat.generate);

  if (!chat.stream) {
    hap::v1::GenerateResponse msg;
    hap::v1::GenerateStats stats;
    bool have_stats = false;
    while (call->reader->Read(&msg)) {
      if (msg.has_stats()) {
        stats = std::move(*msg.mutable_stats());
        have_stats = true;
      }
    }
    const grpc::Status& st = call->Finish(/*cancel=*/false);
    if (!st.ok()) return SendError(CallError(FromGrpc(st)), &res);
    if (!have_stats) {
      return SendError(CallError(absl::InternalError("the call ended without its results")),
                       &res);
    }
    res.set_content(Dump(Completion(id, created, model, stats)), kJson);
    return;
  }

  // Streamed: the first message decides the HTTP status. A request the front door refuses
  // (bad prompt, limits full) is an HTTP error, not a stream that fails.
  auto first = std::make_shared<hap::v1::GenerateResponse>();
  if (!call->reader->Read(first.get())) {
    const grpc::Status& st = call->Finish(/*cancel=*/false);
    return SendError(
        CallError(st.ok() ? absl::InternalError("the call ended without its results")
                          : FromGrpc(st)),
        &res);
  }
  const bool include_usage = chat.include_usage;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [call, first, id, created, model, include_usage](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        bool ok = write(SseEvent(Chunk(id, created, model, {{"role", "assistant"}, {"content", ""}},
                                       "")));
        hap::v1::GenerateResponse msg = std::move(*first);
        bool have = true;
        while (ok && have) {
          if (msg.has_delta() && !msg.delta().text().empty()) {
            ok = write(SseEvent(Chunk(id, created, model, {{"content", msg.delta().text()}}, "")));
          } else if (msg.has_stats()) {
            const hap::v1::GenerateStats& stats = msg.stats();
            json last = Chunk(id, created, model, json::object(),
                              FinishReason(stats.finish_reason()));
            last["hap"] = HapStats(stats);
            ok = write(SseEvent(last));
            if (ok && include_usage) {
              json usage = Chunk(id, created, model, json::object(), "");
              usage["choices"] = json::array();
              usage["usage"] = Usage(stats);
              ok = write(SseEvent(usage));
            }
          }
          if (ok) have = call->reader->Read(&msg);
        }
        if (!ok) {  // the client went away: cancel the generation
          call->Finish(/*cancel=*/true);
          return false;
        }
        const grpc::Status& st = call->Finish(/*cancel=*/false);
        // Headers are sent: a failure after the first token arrives as an error event.
        if (!st.ok()) ok = write(SseEvent(CallError(FromGrpc(st)).Body()));
        if (ok) ok = write(std::string(kSseDone));
        sink.done();
        return ok;
      },
      [call](bool) { call->Finish(/*cancel=*/true); });
}

}  // namespace hap::svc::openai
