// The OpenAI chat-completions mapping without servers: request bodies → GenerateRequest (the
// conversation through LLaVA-1.5's chat template, the image from its data: URI), errors → status
// and OpenAI's error shape, results → chat.completion objects and chunks.
#include "services/openai/chat_api.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace hap::svc::openai {
namespace {

using nlohmann::json;

class ChatApiTest : public ::testing::Test {
 protected:
  ChatApiTest() {
    options_.model_id = "scenes-llava";
    options_.max_image_bytes = 1000;
    options_.chat_template = std::make_shared<const ChatTemplate>(ChatTemplate::Llava15());
  }

  static std::string DataUri(const std::string& bytes, const char* mime = "image/png") {
    return std::string("data:") + mime + ";base64," + absl::Base64Escape(bytes);
  }

  // {"model", "messages": [one user turn: image + text]} with `extra` merged in.
  json Body(const std::string& text, json extra = json::object()) const {
    json body = {{"model", "scenes-llava"},
                 {"messages",
                  {{{"role", "user"},
                    {"content",
                     {{{"type", "image_url"}, {"image_url", {{"url", DataUri("PNGBYTES")}}}},
                      {{"type", "text"}, {"text", text}}}}}}}};
    body.update(extra);
    return body;
  }

  absl::StatusOr<ChatRequest> Parse(const json& body) const {
    return ParseChatRequest(body.dump(), options_);
  }

  // The error's code and that its message contains `needle`.
  void ExpectError(const json& body, absl::StatusCode code, const std::string& needle) const {
    absl::StatusOr<ChatRequest> r = Parse(body);
    ASSERT_FALSE(r.ok()) << body.dump();
    EXPECT_EQ(r.status().code(), code) << r.status();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  }

  ChatOptions options_;
};

TEST_F(ChatApiTest, OneTurnRendersTheLlavaPrompt) {
  absl::StatusOr<ChatRequest> r = Parse(Body("What colour is the circle?"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.raw_prompt(), "USER: <image>\nWhat colour is the circle? ASSISTANT:");
  EXPECT_TRUE(r->generate.prompt().empty());
  EXPECT_EQ(r->generate.image(), "PNGBYTES");
  EXPECT_FALSE(r->stream);
  EXPECT_EQ(r->generate.max_new_tokens(), 0);  // the front door's default
  EXPECT_EQ(r->generate.sampling().temperature(), 0);  // no generation_config.json: greedy
  EXPECT_EQ(r->generate.sampling().top_p(), 1);
  EXPECT_FALSE(r->generate.pruning().has_retain());
  EXPECT_TRUE(r->generate.pruning().method().empty());  // the front door's default method
}

TEST_F(ChatApiTest, ConversationWithSystemAndAssistantTurns) {
  json body = Body("What colour is it?");
  body["messages"].insert(body["messages"].begin(),
                          json::object({{"role", "system"}, {"content", "Answer in one word."}}));
  body["messages"].push_back(json::object({{"role", "assistant"}, {"content", "Red"}}));
  body["messages"].push_back(json::object({{"role", "user"}, {"content", "And the square?"}}));
  absl::StatusOr<ChatRequest> r = Parse(body);
  ASSERT_TRUE(r.ok()) << r.status();
  // llava-hf's template: a system message has no role prefix; images first in their turn.
  EXPECT_EQ(r->generate.raw_prompt(),
            "Answer in one word. USER: <image>\nWhat colour is it? ASSISTANT: Red USER: And the "
            "square? ASSISTANT:");
}

TEST_F(ChatApiTest, ImagesMustBeOneInlinePngOrJpeg) {
  auto with_url = [&](const std::string& url) {
    json body = Body("Hi?");
    body["messages"][0]["content"][0]["image_url"]["url"] = url;
    return body;
  };
  ExpectError(with_url("https://example.com/a.png"), absl::StatusCode::kInvalidArgument,
              "remote URLs are not fetched");
  ExpectError(with_url("data:image/png;base64,@@@"), absl::StatusCode::kInvalidArgument,
              "does not decode");
  ExpectError(with_url(DataUri("GIF89a", "image/gif")), absl::StatusCode::kInvalidArgument,
              "image/png or image/jpeg");
  ExpectError(with_url("data:image/png,rawbytes"), absl::StatusCode::kInvalidArgument, "base64");
  ExpectError(with_url("ftp://x"), absl::StatusCode::kInvalidArgument, "expected a data: URI");
  ASSERT_TRUE(Parse(with_url(DataUri("JPEGBYTES", "image/jpeg"))).ok());

  // Over the limit: refused before decoding (a bound from the base64 length) and after.
  ExpectError(with_url(DataUri(std::string(1200, 'x'))), absl::StatusCode::kResourceExhausted,
              "the limit is 1000");
  ExpectError(with_url(DataUri(std::string(1001, 'x'))), absl::StatusCode::kResourceExhausted,
              "image is 1001 bytes; the limit is 1000");
  ASSERT_TRUE(Parse(with_url(DataUri(std::string(1000, 'x')))).ok());

  json two = Body("Hi?");
  two["messages"][0]["content"].push_back(two["messages"][0]["content"][0]);
  ExpectError(two, absl::StatusCode::kInvalidArgument, "more than one image");
  ExpectError(json{{"messages", {{{"role", "user"}, {"content", "Hi?"}}}}},
              absl::StatusCode::kInvalidArgument, "no image");
  ExpectError(Body("what is <image>?"), absl::StatusCode::kInvalidArgument,
              "image placeholder");
  json assistant_image = Body("Hi?");
  assistant_image["messages"][0]["role"] = "assistant";
  ExpectError(assistant_image, absl::StatusCode::kInvalidArgument, "part of a user message");
}

TEST_F(ChatApiTest, SamplingStopAndLengthFields) {
  absl::StatusOr<ChatRequest> r =
      Parse(Body("Hi?", {{"temperature", 0.7}, {"top_p", 0.9}, {"top_k", 40}, {"seed", 42},
                         {"max_tokens", 7}, {"stop", {"\n", "END"}}, {"n", 1}}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->generate.sampling().temperature(), 0.7f);
  EXPECT_FLOAT_EQ(r->generate.sampling().top_p(), 0.9f);
  EXPECT_EQ(r->generate.sampling().top_k(), 40);
  EXPECT_EQ(r->generate.sampling().seed(), 42u);
  EXPECT_EQ(r->generate.max_new_tokens(), 7);
  ASSERT_EQ(r->generate.stop_size(), 2);
  EXPECT_EQ(r->generate.stop(1), "END");

  // max_completion_tokens is the current name and wins over max_tokens.
  r = Parse(Body("Hi?", {{"max_tokens", 7}, {"max_completion_tokens", 9}, {"stop", "x"}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->generate.max_new_tokens(), 9);
  EXPECT_EQ(r->generate.stop_size(), 1);

  ExpectError(Body("Hi?", {{"temperature", 2.5}}), absl::StatusCode::kInvalidArgument,
              "'temperature' must be in [0, 2]");
  ExpectError(Body("Hi?", {{"top_p", 0}}), absl::StatusCode::kInvalidArgument, "'top_p'");
  ExpectError(Body("Hi?", {{"max_tokens", 0}}), absl::StatusCode::kInvalidArgument,
              "'max_tokens' must be in [1, 1048576]");
  ExpectError(Body("Hi?", {{"max_tokens", "ten"}}), absl::StatusCode::kInvalidArgument,
              "must be an integer");
  ExpectError(Body("Hi?", {{"stop", {"a", "b", "c", "d", "e"}}}),
              absl::StatusCode::kInvalidArgument, "at most 4");
  ExpectError(Body("Hi?", {{"n", 2}}), absl::StatusCode::kInvalidArgument, "'n' must be 1");
  ExpectError(Body("Hi?", {{"presence_penalty", 0.5}}), absl::StatusCode::kInvalidArgument,
              "not supported");
  ExpectError(Body("Hi?", {{"logprobs", true}}), absl::StatusCode::kInvalidArgument,
              "'logprobs'");
  ExpectError(Body("Hi?", {{"tools", {{{"type", "function"}}}}}),
              absl::StatusCode::kInvalidArgument, "tool calling");
  ExpectError(Body("Hi?", {{"stream_options", {{"include_usage", true}}}}),
              absl::StatusCode::kInvalidArgument, "only allowed with stream");
  r = Parse(Body("Hi?", {{"stream", true}, {"stream_options", {{"include_usage", true}}},
                         {"user", "ignored"}, {"presence_penalty", 0}, {"logprobs", false}}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
}

TEST_F(ChatApiTest, PruningAndTimeoutInTheHapField) {
  absl::StatusOr<ChatRequest> r =
      Parse(Body("Hi?", {{"hap", {{"method", "hap"}, {"retain", "11.1%"}, {"timeout_ms", 500}}}}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.pruning().method(), "hap");
  EXPECT_EQ(r->generate.pruning().retain(), "11.1%");
  EXPECT_EQ(r->timeout_ms, 500);
  r = Parse(Body("Hi?", {{"hap", {{"method", "fastv"}, {"retain", 64}}}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->generate.pruning().retain(), "64");
  r = Parse(Body("Hi?", {{"hap", {{"method", "random"}, {"flops", 0.25}, {"seed", 3}}}}));
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->generate.pruning().flops(), 0.25);
  EXPECT_EQ(r->generate.pruning().seed(), 3u);
  ExpectError(Body("Hi?", {{"hap", {{"retain", "8"}, {"flops", 0.5}}}}),
              absl::StatusCode::kInvalidArgument, "one budget");
  ExpectError(Body("Hi?", {{"hap", {{"budget", "8"}}}}), absl::StatusCode::kInvalidArgument,
              "'hap.budget' is not a known field");
  ExpectError(Body("Hi?", {{"hap", "hap"}}), absl::StatusCode::kInvalidArgument,
              "'hap' must be an object");
}

TEST_F(ChatApiTest, PaqTemperatureInTheHapField) {
  // Unset: the proto field stays unset (the server's τ = 1).
  absl::StatusOr<ChatRequest> r = Parse(Body("Hi?", {{"hap", {{"method", "hap"}, {"retain", 8}}}}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->generate.pruning().has_paq_temperature());
  r = Parse(Body("Hi?", {{"hap", {{"method", "hap"}, {"retain", 8}, {"paq_temperature", 0.05}}}}));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->generate.pruning().has_paq_temperature());
  EXPECT_DOUBLE_EQ(r->generate.pruning().paq_temperature(), 0.05);
  r = Parse(Body("Hi?", {{"hap", {{"method", "hap-flat"}, {"paq_temperature", 100}}}}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->generate.pruning().paq_temperature(), 100);
  // No method: the range is checked here, the method by the front door against its default.
  r = Parse(Body("Hi?", {{"hap", {{"paq_temperature", 0.5}}}}));
  ASSERT_TRUE(r.ok()) << r.status();
  // τ = 1 is every method's default, so any method takes it.
  r = Parse(Body("Hi?", {{"hap", {{"method", "fastv"}, {"paq_temperature", 1}}}}));
  ASSERT_TRUE(r.ok()) << r.status();
  for (double bad : {0.0, 0.005, -1.0, 101.0}) {
    ExpectError(Body("Hi?", {{"hap", {{"method", "hap"}, {"paq_temperature", bad}}}}),
                absl::StatusCode::kInvalidArgument,
                "hap.paq_temperature");
    ExpectError(Body("Hi?", {{"hap", {{"paq_temperature", bad}}}}),
                absl::StatusCode::kInvalidArgument, "must lie in [0.01, 100]");
  }
  ExpectError(Body("Hi?", {{"hap", {{"method", "hap"}, {"paq_temperature", "0.5"}}}}),
              absl::StatusCode::kInvalidArgument, "'hap.paq_temperature' must be a number");
  ExpectError(Body("Hi?", {{"hap", {{"method", "fastv"}, {"paq_temperature", 0.5}}}}),
              absl::StatusCode::kInvalidArgument, "only 'hap' and 'hap-flat'");
  ExpectError(Body("Hi?", {{"hap", {{"method", "uniform"}, {"paq_temperature", 0.5}}}}),
              absl::StatusCode::kInvalidArgument, "hap.paq_temperature 0.5: method 'uniform'");
}

TEST_F(ChatApiTest, MalformedBodiesAndUnknownModels) {
  absl::StatusOr<ChatRequest> r = ParseChatRequest("{not json", options_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "the request body is not valid JSON");
  ExpectError(json::array(), absl::StatusCode::kInvalidArgument, "must be an object");
  ExpectError(json{{"model", "scenes-llava"}}, absl::StatusCode::kInvalidArgument,
              "'messages' is required");
  ExpectError(json{{"messages", json::array()}}, absl::StatusCode::kInvalidArgument,
              "non-empty array");
  ExpectError(json{{"messages", {{{"role", "tool"}, {"content", "x"}}}}},
              absl::StatusCode::kInvalidArgument, "system, user or assistant");
  ExpectError(Body("Hi?", {{"model", "gpt-4o"}}), absl::StatusCode::kNotFound,
              "'gpt-4o' does not exist");
  // No model field: the one model served.
  json no_model = Body("Hi?");
  no_model.erase("model");
  EXPECT_TRUE(Parse(no_model).ok());
}

// Found by tests/fuzz/chat_request_fuzz: a response_format whose type was not a string threw
// out of ParseChatRequest (the HTTP server answered 500) instead of being a 400.
TEST_F(ChatApiTest, ResponseFormatOfTheWrongShapeIsABadRequest) {
  for (const json& format : {json{{"type", nullptr}}, json{{"type", 3}}, json{{"type", {1}}},
                             json::object(), json("text"), json{{"type", "json_object"}}}) {
    ExpectError(Body("Hi?", {{"response_format", format}}), absl::StatusCode::kInvalidArgument,
                "'response_format' only {\"type\": \"text\"} is supported");
  }
  EXPECT_TRUE(Parse(Body("Hi?", {{"response_format", {{"type", "text"}}}})).ok());
}

TEST_F(ChatApiTest, ErrorsMapToHttpStatusAndOpenAiShape) {
  EXPECT_EQ(RequestError(absl::InvalidArgumentError("x")).http_status, 400);
  const ApiError not_found = RequestError(absl::NotFoundError("The model 'm' does not exist"));
  EXPECT_EQ(not_found.http_status, 404);
  EXPECT_EQ(not_found.code, "model_not_found");
  EXPECT_EQ(RequestError(absl::ResourceExhaustedError("image")).http_status, 413);

  EXPECT_EQ(CallError(absl::InvalidArgumentError("prompt is empty")).http_status, 400);
  EXPECT_EQ(CallError(absl::InvalidArgumentError("prompt is 5000 tokens (16 visual + 4984 text); "
                                                 "the model's context is 4096"))
                .code,
            "context_length_exceeded");
  EXPECT_EQ(CallError(absl::ResourceExhaustedError("queue full")).http_status, 429);
  EXPECT_EQ(CallError(absl::ResourceExhaustedError(
                          "PNG image is 9000x9000 = 81000000 pixels; the limit is 40000000 pixels"))
                .http_status,
            413);
  EXPECT_EQ(CallError(absl::UnavailableError("draining")).http_status, 503);
  EXPECT_EQ(CallError(absl::DeadlineExceededError("late")).http_status, 504);
  EXPECT_EQ(CallError(absl::InternalError("bug")).http_status, 500);

  const json body = CallError(absl::ResourceExhaustedError("4 running + 16 queued")).Body();
  EXPECT_EQ(body["error"]["message"], "4 running + 16 queued");
  EXPECT_EQ(body["error"]["type"], "rate_limit_error");
  EXPECT_EQ(body["error"]["code"], "server_full");
  EXPECT_TRUE(body["error"]["param"].is_null());
  EXPECT_TRUE(CallError(absl::InternalError("bug")).Body()["error"]["code"].is_null());

  // Authentication (services/README.md): OpenAI's answer to a bad API key, and one client over
  // its own limit told apart from a full server.
  const ApiError unauthenticated = CallError(absl::UnauthenticatedError("missing or invalid"));
  EXPECT_EQ(unauthenticated.http_status, 401);
  EXPECT_EQ(unauthenticated.type, "invalid_request_error");
  EXPECT_EQ(unauthenticated.code, "invalid_api_key");
  const ApiError limited = CallError(absl::ResourceExhaustedError(
      "client 'a' is at its limit of 1 requests in flight (--auth-max-concurrent-per-client)"));
  EXPECT_EQ(limited.http_status, 429);
  EXPECT_EQ(limited.code, "rate_limit_exceeded");
}

TEST_F(ChatApiTest, CompletionChunksAndUsage) {
  hap::v1::GenerateStats stats;
  stats.set_text("red");
  stats.add_token_ids(5);
  stats.add_token_ids(2);
  stats.set_prompt_tokens(160);
  stats.set_method("hap");
  stats.set_average_visual_tokens(8);
  stats.set_finish_reason(hap::v1::FINISH_REASON_EOS);
  const json c = Completion("chatcmpl-1", 1700000000, "scenes-llava", stats);
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["choices"][0]["message"]["content"], "red");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(c["usage"], json({{"prompt_tokens", 160}, {"completion_tokens", 2},
                              {"total_tokens", 162}}));
  EXPECT_EQ(c["hap"]["method"], "hap");
  EXPECT_EQ(c["hap"]["average_visual_tokens"], 8);
  EXPECT_FALSE(c["hap"].contains("token_ids"));

  stats.set_finish_reason(hap::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(FinishReason(stats.finish_reason()), "length");
  EXPECT_EQ(FinishReason(hap::v1::FINISH_REASON_STOP), "stop");

  const json chunk = Chunk("chatcmpl-1", 1, "m", {{"content", "re"}}, "");
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"]["content"], "re");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(SseEvent(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  // Text that is not UTF-8 still frames (replacement characters) instead of throwing.
  EXPECT_EQ(SseEvent(json{{"a", std::string("\xff")}}), "data: {\"a\":\"\xEF\xBF\xBD\"}\n\n");
}

TEST_F(ChatApiTest, GenerationConfigSetsTheDefaults) {
  const std::string dir = ::testing::TempDir() + "/chat_api_gen_config";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& text) {
    std::ofstream(dir + "/generation_config.json") << text;
    return GenerationDefaults::ForModelDir(dir);
  };
  std::filesystem::remove(dir + "/generation_config.json");
  absl::StatusOr<GenerationDefaults> d = GenerationDefaults::ForModelDir(dir);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->temperature, 0);
  d = write(R"({"bos_token_id": 1, "eos_token_id": 2})");  // llava-hf's: greedy
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->temperature, 0);
  d = write(R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9})");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FLOAT_EQ(d->temperature, 0.6f);
  EXPECT_FLOAT_EQ(d->top_p, 0.9f);
  EXPECT_EQ(d->top_k, 50);  // transformers' default when sampling
  d = write(R"({"do_sample": true, "top_p": 2})");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("generation_config.json: 'top_p'"), std::string::npos);
  d = write("{oops");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("not a JSON object"), std::string::npos);

  options_.defaults = *write(R"({"do_sample": true, "temperature": 0.6})");
  absl::StatusOr<ChatRequest> r = Parse(Body("Hi?"));
  ASSERT_TRUE(r.ok());
  EXPECT_FLOAT_EQ(r->generate.sampling().temperature(), 0.6f);
  r = Parse(Body("Hi?", {{"temperature", 0}}));  // the request's own value wins
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->generate.sampling().temperature(), 0);
}

// A Qwen2.5-VL-style template: the image rendered as <|vision_start|><|image_pad|><|vision_end|>,
// the placeholder the front door is told to expect once.
TEST_F(ChatApiTest, TheImagePlaceholderIsTheOneTheModelUses) {
  absl::StatusOr<ChatTemplate> qwen = ChatTemplate::Parse(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{% for c in m.content %}"
      "{% if c.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
      "{% else %}{{ c.text }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "test template");
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  options_.chat_template = std::make_shared<const ChatTemplate>(std::move(*qwen));
  options_.image_placeholder = "<|image_pad|>";
  options_.bos_token = "";
  absl::StatusOr<ChatRequest> r = Parse(Body("Describe it."));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.raw_prompt(),
            "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe it.<|im_end|>\n"
            "<|im_start|>assistant\n");
  ExpectError(Body("Is <|image_pad|> an image?"), absl::StatusCode::kInvalidArgument,
              "'<|image_pad|>', which is the image placeholder");
  // "<image>" is only text to this model.
  EXPECT_TRUE(Parse(Body("What is <image>?")).ok());
  // A template that renders LLaVA's placeholder does not place this model's image.
  options_.chat_template = std::make_shared<const ChatTemplate>(ChatTemplate::Llava15());
  ExpectError(Body("Describe it."), absl::StatusCode::kInvalidArgument,
              "must place the image as '<|image_pad|>' exactly once");
}

}  // namespace
}  // namespace hap::svc::openai
