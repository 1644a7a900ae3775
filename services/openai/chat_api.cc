#include "services/openai/chat_api.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "runtime/prune/factory.h"

namespace hap::svc::openai {
namespace {

using nlohmann::json;

constexpr int64_t kMaxNewTokensLimit = 1 << 20;  // GenerateRequest.max_new_tokens' range
constexpr size_t kMaxStopStrings = 4;            // as OpenAI's API

absl::Status Invalid(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("'", field, "' ", problem));
}

// A JSON value that is absent or null.
bool Unset(const json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null();
}

absl::StatusOr<double> Number(const json& v, absl::string_view field) {
  if (!v.is_number()) return Invalid(field, absl::StrCat("must be a number, got ", v.dump()));
  const double d = v.get<double>();
  if (!std::isfinite(d)) return Invalid(field, "must be finite");
  return d;
}

absl::StatusOr<int64_t> Integer(const json& v, absl::string_view field) {
  if (!v.is_number_integer()) {
    return Invalid(field, absl::StrCat("must be an integer, got ", v.dump()));
  }
  return v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
}

// The bytes of a "data:image/png;base64,..." or "data:image/jpeg;base64,..." URI.
absl::StatusOr<std::string> DecodeDataUri(std::string_view url, int64_t max_image_bytes) {
  const absl::string_view u(url.data(), url.size());
  if (absl::StartsWithIgnoreCase(u, "http://") || absl::StartsWithIgnoreCase(u, "https://")) {
    return absl::InvalidArgumentError(
        "image_url: remote URLs are not fetched (the server fetches nothing); send the image "
        "inline as data:image/png;base64,... or data:image/jpeg;base64,...");
  }
  if (!absl::StartsWithIgnoreCase(u, "data:")) {
    return absl::InvalidArgumentError(
        absl::StrCat("image_url: expected a data: URI (data:image/png;base64,...), got '",
                     u.substr(0, 32), u.size() > 32 ? "...'" : "'"));
  }
  const size_t comma = u.find(',');
  if (comma == absl::string_view::npos) {
    return absl::InvalidArgumentError("image_url: the data: URI has no ',' before its data");
  }
  const absl::string_view meta = u.substr(5, comma - 5);
  const absl::string_view data = u.substr(comma + 1);
  if (!absl::EndsWithIgnoreCase(meta, ";base64")) {
    return absl::InvalidArgumentError("image_url: the data: URI must be base64 (';base64,')");
  }
  const absl::string_view mime = meta.substr(0, meta.size() - 7);
  if (!absl::EqualsIgnoreCase(mime, "image/png") && !absl::EqualsIgnoreCase(mime, "image/jpeg") &&
      !absl::EqualsIgnoreCase(mime, "image/jpg")) {
    return absl::InvalidArgumentError(
        absl::StrCat("image_url: images must be image/png or image/jpeg, got '", mime, "'"));
  }
  // Checked before decoding: 4 base64 characters carry 3 bytes.
  const int64_t decoded_bound = static_cast<int64_t>(data.size()) / 4 * 3;
  if (decoded_bound > max_image_bytes + 2) {
    return absl::ResourceExhaustedError(absl::StrCat("image is about ", decoded_bound,
                                                     " bytes; the limit is ", max_image_bytes,
                                                     " (--max-image-bytes)"));
  }
  std::string bytes;
  if (!absl::Base64Unescape(data, &bytes)) {
    return absl::InvalidArgumentError("image_url: the data: URI's base64 does not decode");
  }
  if (bytes.empty()) return absl::InvalidArgumentError("image_url: the image is empty");
  if (static_cast<int64_t>(bytes.size()) > max_image_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("image is ", bytes.size(),
                                                     " bytes; the limit is ", max_image_bytes,
                                                     " (--max-image-bytes)"));
  }
  return bytes;
}

// The messages in the form chat templates of multimodal models take (transformers' processors
// pass the same): content always a list of {"type": "text", "text"} / {"type": "image"} parts.
// The one image's bytes go to `*image`.
absl::StatusOr<json> TemplateMessages(const json& messages, const ChatOptions& options,
                                      std::string* image) {
  if (!messages.is_array() || messages.empty()) {
    return Invalid("messages", "must be a non-empty array");
  }
  json out = json::array();
  int images = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Invalid(where, "must be an object");
    auto role_it = m.find("role");
    if (role_it == m.end() || !role_it->is_string()) {
      return Invalid(absl::StrCat(where, ".role"), "is required (system, user or assistant)");
    }
    std::string role = role_it->get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for it
    if (role != "system" && role != "user" && role != "assistant") {
      return Invalid(absl::StrCat(where, ".role"),
                     absl::StrCat("must be system, user or assistant, got '", role, "'"));
    }
    json parts = json::array();
    auto content_it = m.find("content");
    const std::string content_field = absl::StrCat(where, ".content");
    if (content_it == m.end() || content_it->is_null()) {
      if (role != "assistant") return Invalid(content_field, "is required");
    } else if (content_it->is_string()) {
      parts.push_back({{"type", "text"}, {"text", content_it->get<std::string>()}});
    } else if (content_it->is_array()) {
      for (size_t k = 0; k < content_it->size(); ++k) {
        const json& part = (*content_it)[k];
        const std::string part_field = absl::StrCat(content_field, "[", k, "]");
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
          return Invalid(part_field, "must be an object with a 'type'");
        }
        const std::string type = part["type"].get<std::string>();
        if (type == "text") {
          if (!part.contains("text") || !part["text"].is_string()) {
            return Invalid(absl::StrCat(part_field, ".text"), "must be a string");
          }
          parts.push_back({{"type", "text"}, {"text", part["text"]}});
        } else if (type == "image_url") {
          if (role != "user") {
            return Invalid(part_field, "an image can only be part of a user message");
          }
          const json* url = nullptr;
          if (part.contains("image_url") && part["image_url"].is_object() &&
              part["image_url"].contains("url")) {
            url = &part["image_url"]["url"];
          } else if (part.contains("image_url")) {
            url = &part["image_url"];  // some clients send the URL itself
          }
          if (url == nullptr || !url->is_string()) {
            return Invalid(absl::StrCat(part_field, ".image_url.url"), "must be a string");
          }
          if (++images > 1) {
            return absl::InvalidArgumentError(
                "the conversation holds more than one image; this server takes exactly one "
                "image per request");
          }
          HAP_ASSIGN_OR_RETURN(*image,
                               DecodeDataUri(url->get<std::string>(), options.max_image_bytes));
          parts.push_back({{"type", "image"}});
        } else {
          return Invalid(absl::StrCat(part_field, ".type"),
                         absl::StrCat("must be text or image_url, got '", type, "'"));
        }
      }
    } else {
      return Invalid(content_field, "must be a string or an array of content parts");
    }
    for (const json& p : parts) {
      if (p["type"] != "text") continue;
      const std::string& text = p["text"].get_ref<const std::string&>();
      if (absl::StrContains(text, options.image_placeholder)) {
        return Invalid(content_field,
                       absl::StrCat("contains the text '", options.image_placeholder,
                                    "', which is the image placeholder; send the image as an "
                                    "image_url part"));
      }
      if (options.control_tokens != nullptr &&
          options.control_tokens->Encode(text, Tokenizer::SpecialTokens::kRecognized) !=
              options.control_tokens->Encode(text)) {
        return Invalid(content_field,
                       "spells one of the model's special tokens (chat markup such as "
                       "'<|im_start|>'), which a message cannot carry");
      }
    }
    out.push_back({{"role", role}, {"content", std::move(parts)}});
  }
  if (images == 0) {
    return absl::InvalidArgumentError(
        "the conversation holds no image; this server answers about exactly one image per "
        "request (an image_url part with a data: URI in a user message)");
  }
  return out;
}

absl::Status ParseHapField(const json& hap, ChatRequest* out) {
  if (!hap.is_object()) return Invalid("hap", "must be an object");
  if (!Unset(hap, "retain") && !Unset(hap, "flops")) {
    return absl::InvalidArgumentError("give one budget in 'hap': retain or flops");
  }
  hap::v1::Pruning* p = out->generate.mutable_pruning();
  for (auto it = hap.begin(); it != hap.end(); ++it) {
    const std::string field = absl::StrCat("hap.", it.key());
    const json& v = it.value();
    if (v.is_null()) continue;
    if (it.key() == "method") {
      if (!v.is_string()) return Invalid(field, "must be a string");
      p->set_method(v.get<std::string>());
    } else if (it.key() == "retain") {
      if (v.is_string()) {
        p->set_retain(v.get<std::string>());
      } else {
        HAP_ASSIGN_OR_RETURN(double r, Number(v, field));
        p->set_retain(absl::StrFormat("%.17g", r));
      }
    } else if (it.key() == "flops") {
      HAP_ASSIGN_OR_RETURN(double f, Number(v, field));
      p->set_flops(f);
    } else if (it.key() == "seed") {
      HAP_ASSIGN_OR_RETURN(int64_t s, Integer(v, field));
      p->set_seed(static_cast<uint64_t>(s));
    } else if (it.key() == "paq_temperature") {
      HAP_ASSIGN_OR_RETURN(double t, Number(v, field));
      p->set_paq_temperature(t);
    } else if (it.key() == "timeout_ms") {
      HAP_ASSIGN_OR_RETURN(int64_t t, Integer(v, field));
      if (t < 1) return Invalid(field, "must be >= 1");
      out->timeout_ms = t;
    } else {
      return Invalid(field,
                     "is not a known field (method, retain, flops, seed, paq_temperature, "
                     "timeout_ms)");
    }
  }
  // The range here, and the method when the request names one (without one, the front door
  // checks it against its default method: PruneFromProto).
  if (p->has_paq_temperature()) {
    HAP_RETURN_IF_ERROR(ValidatePaqTemperature(p->method().empty() ? "hap" : p->method(),
                                               p->paq_temperature(), "hap.paq_temperature"));
  }
  return absl::OkStatus();
}

absl::Status ParseSampling(const json& body, const ChatOptions& options, ChatRequest* out) {
  hap::v1::Sampling* s = out->generate.mutable_sampling();
  const GenerationDefaults& d = options.defaults;
  s->set_temperature(d.temperature);
  s->set_top_p(d.top_p);
  s->set_top_k(d.top_k);
  if (!Unset(body, "temperature")) {
    HAP_ASSIGN_OR_RETURN(double t, Number(body["temperature"], "temperature"));
    if (t < 0 || t > 2) return Invalid("temperature", "must be in [0, 2]");
    s->set_temperature(static_cast<float>(t));
  }
  if (!Unset(body, "top_p")) {
    HAP_ASSIGN_OR_RETURN(double p, Number(body["top_p"], "top_p"));
    if (p <= 0 || p > 1) return Invalid("top_p", "must be in (0, 1]");
    s->set_top_p(static_cast<float>(p));
  }
  if (!Unset(body, "top_k")) {  // vLLM's extra parameter; -1 or 0 = no limit
    HAP_ASSIGN_OR_RETURN(int64_t k, Integer(body["top_k"], "top_k"));
    if (k < -1 || k > (1 << 30)) return Invalid("top_k", "must be -1, 0 or a positive count");
    s->set_top_k(k < 0 ? 0 : static_cast<int32_t>(k));
  }
  if (!Unset(body, "seed")) {
    HAP_ASSIGN_OR_RETURN(int64_t seed, Integer(body["seed"], "seed"));
    s->set_seed(static_cast<uint64_t>(seed));
  }
  return absl::OkStatus();
}

// Fields of OpenAI's API this server does not implement: refused rather than ignored, so a
// client never gets an answer that silently differs from what it asked for.
absl::Status RefuseUnsupported(const json& body) {
  if (!Unset(body, "n")) {
    HAP_ASSIGN_OR_RETURN(int64_t n, Integer(body["n"], "n"));
    if (n != 1) return Invalid("n", "must be 1 (one choice per request)");
  }
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    if (!Unset(body, penalty)) {
      HAP_ASSIGN_OR_RETURN(double v, Number(body[penalty], penalty));
      if (v != 0) return Invalid(penalty, "is not supported (only 0)");
    }
  }
  if (!Unset(body, "logprobs") && body["logprobs"] != false) {
    return Invalid("logprobs", "is not supported");
  }
  for (const char* tool : {"tools", "functions"}) {
    if (!Unset(body, tool) && !(body[tool].is_array() && body[tool].empty())) {
      return Invalid(tool, "is not supported (the model has no tool calling)");
    }
  }
  if (!Unset(body, "response_format")) {
    const json& f = body["response_format"];
    // value("type", "") would throw for a "type" that is not a string (a 500, not a 400).
    const auto type = f.find("type");  // end() for a non-object
    if (type == f.end() || !type->is_string() || *type != "text") {
      return Invalid("response_format", "only {\"type\": \"text\"} is supported");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GenerationDefaults> GenerationDefaults::ForModelDir(const std::string& dir) {
  GenerationDefaults d;
  const std::string path = dir + "/generation_config.json";
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (absl::IsNotFound(text.status())) return d;  // greedy unless the directory says otherwise
  if (!text.ok()) return text.status();
  const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  auto field = [&](const char* key) -> const json* {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  const json* do_sample = field("do_sample");
  if (do_sample != nullptr && !do_sample->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": 'do_sample' must be true or false"));
  }
  if (do_sample == nullptr || !do_sample->get<bool>()) return d;  // greedy
  d.temperature = 1;  // transformers' defaults when sampling
  d.top_k = 50;
  struct Field {
    const char* key;
    double lo, hi;
  };
  for (const Field& fd :
       {Field{"temperature", 0, 100}, Field{"top_p", 1e-9, 1}, Field{"top_k", 0, 1 << 30}}) {
    const json* v = field(fd.key);
    if (v == nullptr) continue;
    if (!v->is_number() || v->get<double>() < fd.lo || v->get<double>() > fd.hi) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": '", fd.key, "' must be a number in [",
                                                     fd.lo, ", ", fd.hi, "], got ", v->dump()));
    }
  }
  if (const json* v = field("temperature")) d.temperature = v->get<float>();
  if (const json* v = field("top_p")) d.top_p = v->get<float>();
  if (const json* v = field("top_k")) d.top_k = v->get<int>();
  return d;
}

absl::StatusOr<ChatRequest> ParseChatRequest(std::string_view body_text,
                                             const ChatOptions& options) {
  const json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return absl::InvalidArgumentError("the request body is not valid JSON");
  }
  if (!body.is_object()) return absl::InvalidArgumentError("the request body must be an object");
  ChatRequest out;
  if (!Unset(body, "model")) {
    if (!body["model"].is_string()) return Invalid("model", "must be a string");
    const std::string model = body["model"].get<std::string>();
    if (model != options.model_id) {
      return absl::NotFoundError(absl::StrCat(
          "The model '", model, "' does not exist; this server serves '", options.model_id, "'"));
    }
  }
  HAP_RETURN_IF_ERROR(RefuseUnsupported(body));
  if (!Unset(body, "stream")) {
    if (!body["stream"].is_boolean()) return Invalid("stream", "must be true or false");
    out.stream = body["stream"].get<bool>();
  }
  if (!Unset(body, "stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object()) return Invalid("stream_options", "must be an object");
    if (!out.stream) return Invalid("stream_options", "is only allowed with stream: true");
    if (so.contains("include_usage")) {
      if (!so["include_usage"].is_boolean()) {
        return Invalid("stream_options.include_usage", "must be true or false");
      }
      out.include_usage = so["include_usage"].get<bool>();
    }
  }
  // max_completion_tokens is the current name; max_tokens the deprecated one.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (Unset(body, key)) continue;
    HAP_ASSIGN_OR_RETURN(int64_t n, Integer(body[key], key));
    if (n < 1 || n > kMaxNewTokensLimit) {
      return Invalid(key, absl::StrCat("must be in [1, ", kMaxNewTokensLimit, "], got ", n));
    }
    out.generate.set_max_new_tokens(static_cast<int32_t>(n));
  }
  if (!Unset(body, "stop")) {
    const json& stop = body["stop"];
    if (stop.is_string()) {
      out.generate.add_stop(stop.get<std::string>());
    } else if (stop.is_array()) {
      if (stop.size() > kMaxStopStrings) {
        return Invalid("stop", absl::StrCat("holds at most ", kMaxStopStrings, " strings"));
      }
      for (const json& s : stop) {
        if (!s.is_string()) return Invalid("stop", "must be a string or an array of strings");
        out.generate.add_stop(s.get<std::string>());
      }
    } else {
      return Invalid("stop", "must be a string or an array of strings");
    }
  }
  HAP_RETURN_IF_ERROR(ParseSampling(body, options, &out));
  if (!Unset(body, "hap")) HAP_RETURN_IF_ERROR(ParseHapField(body["hap"], &out));

  if (!body.contains("messages")) return Invalid("messages", "is required");
  std::string image;
  HAP_ASSIGN_OR_RETURN(json messages, TemplateMessages(body["messages"], options, &image));
  const json extra = {{"bos_token", options.bos_token}, {"eos_token", options.eos_token}};
  absl::StatusOr<std::string> rendered =
      options.chat_template->Render(messages, /*add_generation_prompt=*/true, extra);
  if (!rendered.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the model's chat template (",
                                                   options.chat_template->origin(),
                                                   "): ", rendered.status().message()));
  }
  std::string prompt = std::move(*rendered);
  // Tokenization adds BOS itself (as transformers tokenizes a rendered chat without special
  // tokens), so a template's leading bos_token text is dropped.
  if (!options.bos_token.empty() && absl::StartsWith(prompt, options.bos_token)) {
    prompt.erase(0, options.bos_token.size());
  }
  const std::string& placeholder = options.image_placeholder;
  const size_t first = prompt.find(placeholder);
  if (first == std::string::npos || prompt.find(placeholder, first + 1) != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model's chat template (", options.chat_template->origin(),
                     ") must place the image as '", placeholder, "' exactly once; it rendered it ",
                     first == std::string::npos ? "0 times" : "more than once"));
  }
  out.generate.set_raw_prompt(std::move(prompt));
  out.generate.set_image(std::move(image));
  return out;
}

nlohmann::json ApiError::Body() const {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", nullptr},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

namespace {

// An error answer carrying `status`'s message.
ApiError WithMessage(const absl::Status& status, int http_status, std::string type,
                     std::string code = "") {
  return ApiError{.http_status = http_status,
                  .type = std::move(type),
                  .code = std::move(code),
                  .message = std::string(status.message())};
}

}  // namespace

ApiError RequestError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return WithMessage(status, 404, "invalid_request_error", "model_not_found");
    case absl::StatusCode::kResourceExhausted:
      return WithMessage(status, 413, "invalid_request_error", "image_too_large");
    default:
      return WithMessage(status, 400, "invalid_request_error");
  }
}

namespace {

// CallError's answer by the status code (and, where one code has several causes, the message).
ApiError CallErrorByCode(const absl::Status& status) {
  const absl::string_view message = status.message();
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return WithMessage(
          status, 400, "invalid_request_error",
          absl::StrContains(message, "the model's context is") ? "context_length_exceeded" : "");
    case absl::StatusCode::kResourceExhausted:
      // The limits on one request's image (bytes, pixels) are the request's fault, not load.
      if (absl::StrContains(message, "image is ")) {
        return WithMessage(status, 413, "invalid_request_error", "image_too_large");
      }
      // One client over its own limit, or the whole server full.
      return WithMessage(status, 429, "rate_limit_error",
                         absl::StrContains(message, "--auth-max-concurrent-per-client")
                             ? "rate_limit_exceeded"
                             : "server_full");
    case absl::StatusCode::kUnauthenticated:
      // OpenAI's answer to a missing or wrong API key.
      return WithMessage(status, 401, "invalid_request_error", "invalid_api_key");
    case absl::StatusCode::kUnavailable:
      return WithMessage(status, 503, "server_error", "unavailable");
    case absl::StatusCode::kDeadlineExceeded:
      return WithMessage(status, 504, "timeout_error", "deadline_exceeded");
    case absl::StatusCode::kCancelled:
      // The client closed the request (nginx's convention).
      return WithMessage(status, 499, "cancelled");
    default:
      return WithMessage(status, 500, "server_error");
  }
}

}  // namespace

ApiError CallError(const absl::Status& status) {
  ApiError e = CallErrorByCode(status);
  if (e.message.empty()) e.message = absl::StatusCodeToString(status.code());
  return e;
}

std::string FinishReason(hap::v1::FinishReason reason) {
  return reason == hap::v1::FINISH_REASON_LENGTH ? "length" : "stop";
}

nlohmann::json Usage(const hap::v1::GenerateStats& stats) {
  // Visual tokens count as prompt tokens, as every OpenAI-compatible VLM server counts them;
  // completion tokens are every id generated, an ending EOS included.
  const int prompt = stats.prompt_tokens();
  const int completion = stats.token_ids_size();
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

nlohmann::json HapStats(const hap::v1::GenerateStats& stats) {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  o.always_print_enums_as_ints = false;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(stats, &text, o).ok()) return json::object();
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return json::object();
  j.erase("token_ids");  // the answer and its count are in the message and usage already
  j.erase("text");
  return j;
}

nlohmann::json Completion(const std::string& id, int64_t created, const std::string& model,
                          const hap::v1::GenerateStats& stats) {
  return {{"id", id},
          {"object", "chat.completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0},
                                    {"message", {{"role", "assistant"}, {"content", stats.text()}}},
                                    {"logprobs", nullptr},
                                    {"finish_reason", FinishReason(stats.finish_reason())}}})},
          {"usage", Usage(stats)},
          {"hap", HapStats(stats)}};
}

nlohmann::json Chunk(const std::string& id, int64_t created, const std::string& model,
                     nlohmann::json delta, const std::string& finish_reason) {
  return {
      {"id", id},
      {"object", "chat.completion.chunk"},
      {"created", created},
      {"model", model},
      {"choices", json::array({{{"index", 0},
                                {"delta", std::move(delta)},
                                {"logprobs", nullptr},
                                {"finish_reason",
                                 finish_reason.empty() ? json(nullptr) : json(finish_reason)}}})}};
}

std::string SseEvent(const nlohmann::json& event) {
  return absl::StrCat("data: ", event.dump(-1, ' ', false, json::error_handler_t::replace), "\n\n");
}

}  // namespace hap::svc::openai
