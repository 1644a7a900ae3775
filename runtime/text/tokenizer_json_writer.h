// tokenizer.json for a SentencePiece BPE tokenizer.model, in the form llava-hf ships
// (LlamaTokenizerFast, legacy): the dummy prefix and '▁' for spaces as normalizer on every text
// segment, BPE with byte fallback whose merges are ordered by the merged piece's SentencePiece
// score, the ▁/byte-fallback/strip decoder, and BOS by the post-processor. transformers then
// reads the directory's own file instead of converting tokenizer.model itself, so both give the
// project's ids.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace hap {

// A token after the SentencePiece pieces (llava-hf's <image> and <pad>).
struct ExtraAddedToken {
  int id = 0;
  std::string content;
};

// The file's text. The model must be BPE with identity normalization and the dummy prefix (as
// runtime/tiny/train_tokenizer.h trains, and LLaMA's is): the result is checked by encoding
// a probe text with both and comparing the ids, and FailedPrecondition names `model_path` when
// they differ. Extra tokens must have ids at or past the SentencePiece vocabulary.
absl::StatusOr<std::string> TokenizerJsonFromSentencePiece(
    const std::string& model_path, const std::vector<ExtraAddedToken>& extra);

}  // namespace hap
