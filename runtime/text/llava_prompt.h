// LLaVA-1.5 chat prompt: `USER: <image>\n{question} ASSISTANT:` with <image> expanded to the
// visual-token placeholders (docs/design.md §2; tools/pytorch/llava_model.py prompt_ids).
//
// The ids are those of LLaVA's own training code (llava/mm_utils.py tokenizer_image_token):
// the prompt is split at "<image>", each chunk is encoded by the SentencePiece model on its own
// (so each gets the dummy-prefix '▁', the chunk after <image> included), BOS leads, and the
// image ids join the chunks. With LLaMA's vocabulary "USER: <image>\nWhat" is
// [1, 3148, 1001, 29901, 29871, <image>, 29871, 13, 5618]: '▁US' 'ER' ':' '▁', then '▁' '\n'
// 'What', as transformers' LLaVA tests show for llava-hf's processor. tests/text pins the ids
// on the default model's tokenizer (tools/llava_prompt_ids.py derives them).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/text/tokenizer.h"

namespace hap {

struct PromptTokens {
  std::vector<int32_t> ids;  // BOS, "USER:" text, n_vis image ids, question text
  int vis_begin = 0;         // index of the first image id in `ids`
  int n_vis = 0;             // number of image ids (== num_visual_tokens)
};

// Errors: InvalidArgument "prompt is empty" for an empty or whitespace-only question, and
// InvalidArgument naming the token counts when the prompt exceeds `max_tokens`.
// A literal "<image>" in the question is ordinary text: only the template's placeholder expands.
absl::StatusOr<PromptTokens> BuildLlavaPrompt(const Tokenizer& tok, std::string_view question,
                                              int image_token_index, int num_visual_tokens,
                                              int max_tokens);

// A whole prompt already rendered (by a chat template) with exactly one "<image>" placeholder,
// which expands to `num_visual_tokens` image ids; the text on either side is tokenized as
// BuildLlavaPrompt tokenizes the template's. InvalidArgument when the placeholder is missing or
// repeated (one image per request) and when the prompt exceeds `max_tokens`.
absl::StatusOr<PromptTokens> TokenizeImagePrompt(const Tokenizer& tok, std::string_view text,
                                                 int image_token_index, int num_visual_tokens,
                                                 int max_tokens);

}  // namespace hap
