// BuildLlavaPrompt / TokenizeImagePrompt: token-for-token the ids of LLaVA's
// tokenizer_image_token and of llava_model.prompt_ids().
#include "runtime/text/llava_prompt.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace hap {
namespace {

constexpr absl::string_view kImagePlaceholder = "<image>";

// BOS, `before`, the image ids, `after`, each text encoded on its own with SentencePiece's
// dummy prefix, as LLaVA's tokenizer_image_token encodes the chunks around "<image>" (see
// llava_prompt.h).
absl::StatusOr<PromptTokens> Assemble(const Tokenizer& tok, absl::string_view before_text,
                                      absl::string_view after_text, int image_token_index,
                                      int num_visual_tokens, int max_tokens) {
  if (num_visual_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_visual_tokens must be >= 0, got ", num_visual_tokens));
  }
  // "USER: " ends in a lone '▁' piece and "\n..." starts with one (the dummy prefix): LLaVA-1.5
  // was trained on exactly these ids ([.., 29871, <image>, 29871, 13, ..] with LLaMA's
  // vocabulary), so both stay.
  const std::vector<int32_t> before =
      before_text.empty() ? std::vector<int32_t>() : tok.Encode(std::string(before_text));
  const std::vector<int32_t> after =
      after_text.empty() ? std::vector<int32_t>() : tok.Encode(std::string(after_text));

  const int64_t text_tokens = 1 + static_cast<int64_t>(before.size()) + after.size();
  const int64_t total = text_tokens + num_visual_tokens;
  if (total > max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("prompt is ", total, " tokens (",
                                                   num_visual_tokens, " visual + ", text_tokens,
                                                   " text); the model's context is ", max_tokens));
  }

  PromptTokens out;
  out.ids.reserve(total);
  out.ids.push_back(tok.bos_id());
  out.ids.insert(out.ids.end(), before.begin(), before.end());
  out.vis_begin = static_cast<int>(out.ids.size());
  out.n_vis = num_visual_tokens;
  out.ids.insert(out.ids.end(), num_visual_tokens, image_token_index);
  out.ids.insert(out.ids.end(), after.begin(), after.end());
  return out;
}

}  // namespace

absl::StatusOr<PromptTokens> BuildLlavaPrompt(const Tokenizer& tok, std::string_view question,
                                              int image_token_index, int num_visual_tokens,
                                              int max_tokens) {
  // Debian's Abseil has its own string_view class, distinct from std::string_view.
  const absl::string_view question_view(question.data(), question.size());
  if (absl::StripAsciiWhitespace(question_view).empty()) {
    return absl::InvalidArgumentError("prompt is empty");
  }
  // The question is text even where it spells "<image>": only the template's placeholder expands.
  return Assemble(tok, "USER: ", absl::StrCat("\n", question_view, " ASSISTANT:"),
                  image_token_index, num_visual_tokens, max_tokens);
}

absl::StatusOr<PromptTokens> TokenizeImagePrompt(const Tokenizer& tok, std::string_view text,
                                                 int image_token_index, int num_visual_tokens,
                                                 int max_tokens) {
  const absl::string_view view(text.data(), text.size());
  const size_t at = view.find(kImagePlaceholder);
  if (at == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        "the prompt holds no <image> placeholder; each request carries exactly one image");
  }
  const absl::string_view after = view.substr(at + kImagePlaceholder.size());
  if (after.find(kImagePlaceholder) != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        "the prompt holds more than one <image> placeholder; each request carries exactly one "
        "image");
  }
  return Assemble(tok, view.substr(0, at), after, image_token_index, num_visual_tokens,
                  max_tokens);
}

}  // namespace hap
