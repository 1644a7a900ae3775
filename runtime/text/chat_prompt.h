// A conversation rendered by a chat template and tokenized so that only the template can place
// special tokens: each text part of the messages renders as a placeholder, the template's text
// around the placeholders is tokenized with special tokens recognized (<|im_start|>,
// <|vision_start|><|image_pad|><|vision_end|>, ...), and each message text as text
// (Tokenizer::SpecialTokens::kAsText), so a question cannot forge a control token. Special tokens
// split a tokenizer.json's input before anything else, so where the template puts one between a
// message text and its own text (as chat templates do) the ids equal those of the whole
// rendered string.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/text/chat_template.h"
#include "runtime/text/tokenizer.h"

namespace hap {

// `messages` as ChatTemplate::Render takes them. InvalidArgument when rendering fails, and when
// the template does not render each message text exactly once as it is (one that trims, repeats
// or drops a message's text would make the placeholders' ids wrong).
absl::StatusOr<std::vector<int32_t>> TokenizeChat(
    const Tokenizer& tokenizer, const ChatTemplate& chat_template, const nlohmann::json& messages,
    bool add_generation_prompt, const nlohmann::json& extra = nlohmann::json::object());

}  // namespace hap
