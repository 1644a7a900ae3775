#include "runtime/text/chat_prompt.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace hap {
namespace {

// The placeholder of message text i: control characters a rendered template would not hold on
// its own, and that no message text reaches (those are never rendered).
std::string Placeholder(size_t i) { return absl::StrCat("\x1e", "hap-text-", i, "\x1e"); }

}  // namespace

absl::StatusOr<std::vector<int32_t>> TokenizeChat(const Tokenizer& tokenizer,
                                                  const ChatTemplate& chat_template,
                                                  const nlohmann::json& messages,
                                                  bool add_generation_prompt,
                                                  const nlohmann::json& extra) {
  // Each message text (a string content or a {"type": "text"} part) out, a placeholder in.
  std::vector<std::string> texts;
  nlohmann::json masked = messages;
  auto mask = [&texts](nlohmann::json& text) {
    if (!text.is_string()) return;
    texts.push_back(text.get<std::string>());
    text = Placeholder(texts.size() - 1);
  };
  if (masked.is_array()) {
    for (nlohmann::json& message : masked) {
      if (!message.is_object() || !message.contains("content")) continue;
      nlohmann::json& content = message["content"];
      if (content.is_string()) {
        mask(content);
      } else if (content.is_array()) {
        for (nlohmann::json& part : content) {
          if (part.is_object() && part.value("type", "") == "text" && part.contains("text")) {
            mask(part["text"]);
          }
        }
      }
    }
  }
  HAP_ASSIGN_OR_RETURN(const std::string rendered,
                       chat_template.Render(masked, add_generation_prompt, extra));
  std::vector<int32_t> ids;
  auto append = [&ids](const std::vector<int32_t>& more) {
    ids.insert(ids.end(), more.begin(), more.end());
  };
  size_t at = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string placeholder = Placeholder(i);
    const size_t found = rendered.find(placeholder, at);
    if (found == std::string::npos || rendered.find(placeholder, found + 1) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chat template ", chat_template.origin(), " does not render message text ", i + 1,
          " exactly once as given; its special tokens cannot be kept apart from the text"));
    }
    append(tokenizer.Encode(std::string_view(rendered).substr(at, found - at),
                            Tokenizer::SpecialTokens::kRecognized));
    append(tokenizer.Encode(texts[i], Tokenizer::SpecialTokens::kAsText));
    at = found + placeholder.size();
  }
  append(tokenizer.Encode(std::string_view(rendered).substr(at),
                          Tokenizer::SpecialTokens::kRecognized));
  return ids;
}

}  // namespace hap
