// ChatTemplate, the public face of the chat-template interpreter: a lexer
// (chat_template_lexer.cc) feeds a recursive-descent parser (chat_template_parser.cc) that builds
// an AST, which a tree-walking renderer (chat_template_render.cc) evaluates over nlohmann::json
// values with Python semantics (chat_template_values.cc, chat_template_builtins.cc).
#include "runtime/text/chat_template.h"

#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "runtime/text/chat_template_internal.h"

namespace hap {
namespace chat_template_internal {
namespace {

// LLaVA-1.5's conversation format: llava-hf's chat_template.json for llava-1.5 (the image
// placeholders of a turn first, then its text; "USER: ... ASSISTANT:"). transformers renders it
// with trim_blocks and lstrip_blocks, as Render does. '<image>\n' is written as Jinja's escape.
constexpr char kLlava15[] =
    R"({% for message in messages %}{% if message['role'] != 'system' %})"
    R"({{ message['role'].upper() + ': '}}{% endif %}{# Render all images first #})"
    R"({% for content in message['content'] | selectattr('type', 'equalto', 'image') %})"
    R"({{ '<image>\n' }}{% endfor %}{# Render all text next #})"
    R"({% if message['role'] != 'assistant' %})"
    R"({% for content in message['content'] | selectattr('type', 'equalto', 'text') %})"
    R"({{ content['text'] + ' '}}{% endfor %}{% else %})"
    R"({% for content in message['content'] | selectattr('type', 'equalto', 'text') %})"
    R"({% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}{% endif %})"
    R"({% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %})";

absl::StatusOr<Json> ReadJsonFile(const std::string& path) {
  HAP_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": malformed JSON: ", e.what()));
  }
}

}  // namespace
}  // namespace chat_template_internal

using chat_template_internal::Json;

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source, std::string origin) {
  // Jinja reads \r\n and \r as \n and drops the template's one trailing newline.
  std::string text;
  text.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      text += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      text += source[i];
    }
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  try {
    HAP_ASSIGN_OR_RETURN(std::vector<chat_template_internal::Token> tokens,
                         chat_template_internal::Lex(text, origin));
    auto body = std::make_shared<chat_template_internal::Block>();
    HAP_RETURN_IF_ERROR(
        chat_template_internal::ParseTemplate(std::move(tokens), origin, body.get()));
    ChatTemplate t;
    t.origin_ = std::move(origin);
    t.source_ = std::string(source);
    t.body_ = std::move(body);
    return t;
  } catch (const std::exception& e) {  // nlohmann or allocation failures; none are expected
    return absl::InternalError(
        absl::StrCat(origin, ": parsing the chat template failed: ", e.what()));
  }
}

ChatTemplate ChatTemplate::Llava15() {
  static const ChatTemplate* const kTemplate =
      new ChatTemplate(*Parse(chat_template_internal::kLlava15, "built-in LLaVA-1.5"));
  return *kTemplate;
}

absl::StatusOr<ChatTemplate> ChatTemplate::ForModelDir(const std::string& dir) {
  // The template is parsed under the file's path so that errors name it; origin() is its name.
  auto from = [](const std::string& path, const Json& source,
                 const std::string& name) -> absl::StatusOr<ChatTemplate> {
    if (!source.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": \"chat_template\" is not a string"));
    }
    HAP_ASSIGN_OR_RETURN(ChatTemplate t, Parse(source.get_ref<const std::string&>(), path));
    t.origin_ = name;
    return t;
  };
  std::error_code ec;
  const std::string processor = dir + "/chat_template.json";
  if (std::filesystem::exists(processor, ec)) {
    HAP_ASSIGN_OR_RETURN(const Json root, chat_template_internal::ReadJsonFile(processor));
    if (!root.is_object() || !root.contains("chat_template")) {
      return absl::InvalidArgumentError(absl::StrCat(processor, ": no \"chat_template\" key"));
    }
    return from(processor, root["chat_template"], "chat_template.json");
  }
  const std::string tokenizer = dir + "/tokenizer_config.json";
  if (std::filesystem::exists(tokenizer, ec)) {
    HAP_ASSIGN_OR_RETURN(const Json root, chat_template_internal::ReadJsonFile(tokenizer));
    if (!root.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(tokenizer, ": top level is not an object"));
    }
    const auto it = root.find("chat_template");
    if (it != root.end() && it->is_array()) {  // named templates: take "default"
      for (const Json& named : *it) {
        if (named.is_object() && named.value("name", Json()) == "default") {
          return from(tokenizer, named.value("template", Json()), "tokenizer_config.json");
        }
      }
      return absl::InvalidArgumentError(
          absl::StrCat(tokenizer, ": \"chat_template\" has no template named \"default\""));
    }
    if (it != root.end() && !it->is_null()) return from(tokenizer, *it, "tokenizer_config.json");
  }
  return Llava15();
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& messages,
                                                 bool add_generation_prompt,
                                                 const nlohmann::json& extra) const {
  using chat_template_internal::Data;
  if (!extra.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin_, ": extra variables must be a JSON object"));
  }
  try {
    std::map<std::string, chat_template_internal::Value> context;
    for (const auto& [k, v] : extra.items()) context[k] = Data(v);
    context["messages"] = Data(messages);
    context["add_generation_prompt"] = Data(add_generation_prompt);
    return chat_template_internal::RenderTemplate(*body_, origin_, std::move(context));
  } catch (const std::exception& e) {  // nlohmann or allocation failures; none are expected
    return absl::InternalError(
        absl::StrCat(origin_, ": rendering the chat template failed: ", e.what()));
  }
}

}  // namespace hap
