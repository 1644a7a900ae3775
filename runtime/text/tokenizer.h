// SentencePiece tokenizer for LLaVA's LLaMA vocabulary (tokenizer.model in the llava-hf layout).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace hap {

namespace text_internal {
class SentencePieceModel;
}  // namespace text_internal

class StreamingDetokenizer;

// Immutable after Load, so one instance can be shared by every request thread.
class Tokenizer {
 public:
  // Errors name `model_path`: NotFound when it does not exist, InvalidArgument when
  // SentencePiece cannot parse it.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& model_path);
  ~Tokenizer();

  // Plain SentencePiece encoding (dummy-prefix space included, no BOS/EOS).
  std::vector<int32_t> Encode(std::string_view text) const;
  // Ids outside the SentencePiece vocabulary (llava-hf's image token 32000 and pad 32001 live
  // in the embedding table but not in tokenizer.model) decode to ""; so do BOS/EOS.
  std::string Decode(const std::vector<int32_t>& ids) const;

  int bos_id() const;
  int eos_id() const;
  int unk_id() const;
  int vocab_size() const;  // SentencePiece pieces, not the model's embedding rows
  // SentencePiece semantics: an unknown piece maps to the unk id.
  int PieceToId(std::string_view piece) const;
  // "" for ids outside the vocabulary.
  std::string IdToPiece(int id) const;

 private:
  friend class StreamingDetokenizer;

  explicit Tokenizer(std::unique_ptr<text_internal::SentencePieceModel> sp);

  bool InVocab(int64_t id) const { return id >= 0 && id < vocab_size_; }
  bool IsBytePiece(int id) const;
  // The byte a <0xNN> piece stands for; requires IsBytePiece(id).
  uint8_t ByteValue(int id) const;
  // Decodes `ids` (all in the vocabulary) as if they followed text that is already non-empty,
  // i.e. without SentencePiece's removal of the first piece's leading space.
  std::string DecodeContinuation(const std::vector<int>& ids) const;
  std::string DecodeInVocab(const std::vector<int>& ids) const;

  std::unique_ptr<text_internal::SentencePieceModel> sp_;
  int vocab_size_ = 0;
  // A plain piece with no leading '▁' whose surface is anchor_text_: decoding
  // [anchor] + ids and dropping anchor_text_ gives the continuation decoding of ids.
  int anchor_id_ = -1;
  std::string anchor_text_;
};

}  // namespace hap
