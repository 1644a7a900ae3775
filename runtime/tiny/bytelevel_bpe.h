// A byte-level BPE tokenizer trained on a corpus and written as Qwen2 / Qwen2.5-VL ship theirs
// (tokenizer.json with NFC, the Qwen2 split pattern, ByteLevel; tokenizer_config.json with the
// special tokens and the chat template), for tiny Qwen2.5-VL checkpoints.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace hap {

// Qwen2's pre-tokenizer split pattern.
inline constexpr char kQwen2SplitPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The special tokens Qwen2.5-VL adds after the BPE vocabulary, in id order (151643 onwards
// in the published vocabulary): <|endoftext|>, <|im_start|>, <|im_end|>, the object/box/quad
// markers, <|vision_start|>, <|vision_end|>, <|vision_pad|>, <|image_pad|>, <|video_pad|>.
const std::vector<std::string>& QwenSpecialTokens();

// Qwen2.5-VL-Instruct's chat template (system prompt by default, <|vision_start|><|image_pad|>
// <|vision_end|> per image, add_vision_id numbering).
extern const char kQwen25VLChatTemplate[];

struct ByteLevelBpe {
  std::vector<std::string> vocab;  // id → token in GPT-2's byte-to-character form
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
};

// Trains `num_merges` merges on the UTF-8 text of `corpus_path` (NFC, then the Qwen2 split
// pattern): 256 byte tokens, then at each step the most frequent adjacent pair over the words,
// ties to the pair whose tokens sort first. Deterministic. NotFound for a missing corpus;
// InvalidArgument when the corpus runs out of pairs first.
absl::StatusOr<ByteLevelBpe> TrainByteLevelBpe(const std::string& corpus_path, int num_merges);

// tokenizer.json text in Qwen2's layout, the special tokens after the vocabulary.
std::string QwenTokenizerJson(const ByteLevelBpe& bpe);
// tokenizer_config.json text: Qwen2Tokenizer, no BOS, EOS <|im_end|>, pad <|endoftext|>,
// added_tokens_decoder, the chat template, model_max_length.
std::string QwenTokenizerConfigJson(const ByteLevelBpe& bpe, int model_max_length);

}  // namespace hap
