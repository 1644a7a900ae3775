// The tokenizer of a checkpoint directory: Hugging Face tokenizer.json (byte-level BPE as Qwen2
// ships, SentencePiece-style BPE as llava-hf ships) or SentencePiece tokenizer.model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace hap {

namespace text_internal {
class TokenizerImpl;
}  // namespace text_internal

class StreamingDetokenizer;

// Immutable after Load, so one instance can be shared by every request thread.
class Tokenizer {
 public:
  // tokenizer.json when `path` ends in ".json" (tokenizer_config.json beside it, when present,
  // names BOS and EOS), else a SentencePiece model. Errors name `path`: NotFound when it does
  // not exist, InvalidArgument when it cannot be parsed or uses a component this does not
  // implement.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);
  // The tokenizer of a checkpoint directory: tokenizer.json where it exists (transformers
  // prefers it too), else tokenizer.model. NotFound names both when neither exists.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFromDirectory(const std::string& dir);
  ~Tokenizer();

  // Whether special tokens spelled in the text (e.g. "<s>", "<|im_start|>") become their ids.
  // kAsText (the default) keeps user text from forging control tokens; a rendered chat
  // template that places them uses kRecognized. Non-special added tokens are always
  // recognized; tokenizer.model has no added tokens, so there both modes read text as text.
  enum class SpecialTokens { kAsText, kRecognized };

  // Ids of `text` without BOS/EOS: SentencePiece's dummy-prefix space included where the
  // tokenizer has one. Invalid UTF-8 reads as U+FFFD per invalid run (tokenizer.json).
  std::vector<int32_t> Encode(std::string_view text,
                              SpecialTokens specials = SpecialTokens::kAsText) const;
  // Special tokens (BOS/EOS/unk, llava-hf's image and pad tokens, ...) and ids outside the
  // vocabulary decode to "".
  std::string Decode(const std::vector<int32_t>& ids) const;

  int bos_id() const;  // -1 when the tokenizer has none
  int eos_id() const;
  int unk_id() const;
  // One past the largest id the tokenizer knows: pieces plus added tokens (for llava-hf's
  // tokenizer.json the image and pad tokens; tokenizer.model holds pieces only), not the
  // model's embedding rows.
  int vocab_size() const;
  // An unknown piece maps to the unk id.
  int PieceToId(std::string_view piece) const;
  // "" for ids outside the vocabulary.
  std::string IdToPiece(int id) const;
  // "tokenizer.json" or "tokenizer.model": which format was loaded.
  const char* format() const { return format_; }

 private:
  friend class StreamingDetokenizer;

  Tokenizer(std::unique_ptr<text_internal::TokenizerImpl> impl, const char* format);
  // Picks the anchor piece DecodeContinuation needs; InvalidArgument naming `path` if none.
  absl::Status FindAnchor(const std::string& path);

  bool InVocab(int64_t id) const { return id >= 0 && id < vocab_size_; }
  // Whether `id` decodes to raw bytes joined with its neighbours' (<0xNN> pieces, byte-level
  // pieces); appends them to `bytes`.
  bool PieceBytes(int id, std::string* bytes) const;
  // Decodes `ids` (all in the vocabulary) as if they followed text that is already non-empty,
  // i.e. without the removal of the first piece's leading space.
  std::string DecodeContinuation(const std::vector<int>& ids) const;
  std::string DecodeInVocab(const std::vector<int>& ids) const;

  std::unique_ptr<text_internal::TokenizerImpl> impl_;
  const char* format_;
  int vocab_size_ = 0;
  // An ordinary piece that decodes to itself, letters and digits only: decoding
  // [anchor] + ids and dropping anchor_text_ gives the continuation decoding of ids.
  int anchor_id_ = -1;
  std::string anchor_text_;
};

}  // namespace hap
