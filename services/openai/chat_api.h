// The OpenAI chat-completions API as HAP serve speaks it (docs/openai.md): a request body becomes
// a hap.v1.GenerateRequest (the conversation rendered through the model's chat template, the
// image from a data: URI), and the front door's answer becomes a chat.completion object or a
// stream of chat.completion.chunk events. No HTTP and no gRPC calls here: openai_server.cc
// serves it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hap/v1/generate.pb.h"
#include "nlohmann/json.hpp"
#include "runtime/text/chat_template.h"
#include "runtime/text/tokenizer.h"

namespace hap::svc::openai {

// Sampling a request gets for the fields it leaves out: the model's generation_config.json
// (do_sample true → its temperature, top_p, top_k), else greedy.
struct GenerationDefaults {
  float temperature = 0;
  float top_p = 1;
  int top_k = 0;

  // Reads `dir`/generation_config.json when present; InvalidArgument naming the file and field
  // for a malformed one.
  static absl::StatusOr<GenerationDefaults> ForModelDir(const std::string& dir);
};

struct ChatOptions {
  std::string model_id;           // the one model served ("scenes-llava")
  int64_t max_image_bytes = 0;    // decoded image bytes accepted
  std::shared_ptr<const ChatTemplate> chat_template;  // required
  GenerationDefaults defaults;
  std::string bos_token = "<s>";  // the template's bos_token / eos_token variables
  std::string eos_token = "</s>";
  // What the rendered prompt holds exactly once for the image ("<image>" for LLaVA,
  // "<|image_pad|>" for Qwen2.5-VL); a message text may not contain it.
  std::string image_placeholder = "<image>";
  // Where the rendered prompt is tokenized with special tokens recognized (Qwen2.5-VL's chat
  // markup), the model's tokenizer: a message text that spells one of its special tokens is
  // refused, since it would read as control markup. Null: message texts are read as text.
  const Tokenizer* control_tokens = nullptr;
};

struct ChatRequest {
  hap::v1::GenerateRequest generate;  // raw_prompt set; request_id left to the caller
  bool stream = false;
  bool include_usage = false;            // stream_options.include_usage
  std::optional<int64_t> timeout_ms;     // "hap": {"timeout_ms": ...}
};

// Parses and checks a POST /v1/chat/completions body. Errors: InvalidArgument for anything
// malformed or unsupported (naming the field), NotFound for a model other than the one served,
// ResourceExhausted for an image over max_image_bytes.
absl::StatusOr<ChatRequest> ParseChatRequest(std::string_view body, const ChatOptions& options);

// An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}, and its status.
struct ApiError {
  int http_status = 500;
  std::string type;
  std::string code;  // "" → null
  std::string message;

  nlohmann::json Body() const;
};

// A ParseChatRequest error: 400, 404 (model_not_found) or 413 (image too large).
ApiError RequestError(const absl::Status& status);
// An error of the Generate call: 400 bad input, 401 invalid_api_key (UNAUTHENTICATED), 429 a
// limit is full (RESOURCE_EXHAUSTED: server_full, or rate_limit_exceeded for one client's
// --auth-max-concurrent-per-client), 503 a peer down or the server loading/draining, 504
// deadline, 499 cancelled, else 500.
ApiError CallError(const absl::Status& status);

// "stop" (EOS or a stop string) or "length".
std::string FinishReason(hap::v1::FinishReason reason);

// The usage object and the "hap" object (pruning stats and timings) of a finished call.
nlohmann::json Usage(const hap::v1::GenerateStats& stats);
nlohmann::json HapStats(const hap::v1::GenerateStats& stats);

// A whole chat.completion object.
nlohmann::json Completion(const std::string& id, int64_t created, const std::string& model,
                          const hap::v1::GenerateStats& stats);

// One chat.completion.chunk. `delta` is {"role": ...} / {"content": ...} / {}; finish_reason ""
// → null.
nlohmann::json Chunk(const std::string& id, int64_t created, const std::string& model,
                     nlohmann::json delta, const std::string& finish_reason);

// "data: <json>\n\n", the Server-Sent Events framing of one chunk.
std::string SseEvent(const nlohmann::json& event);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace hap::svc::openai
