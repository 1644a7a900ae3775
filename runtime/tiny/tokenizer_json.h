// tokenizer.json beside a llava-hf directory's SentencePiece tokenizer.model (make-tiny, the
// default model, and `hapctl tokenizer-json` for directories that lack one).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "runtime/io/config.h"

namespace hap {

// Writes `dir`/tokenizer.json from `dir`/tokenizer.model, with llava-hf's <image> at
// config.image_token_index and <pad> at the pad id where those lie past the SentencePiece
// vocabulary (runtime/text/tokenizer_json_writer.h). Errors name the file.
absl::Status WriteLlavaTokenizerJson(const std::string& dir, const LlavaConfig& config);

}  // namespace hap
