// The two tokenizer formats behind hap::Tokenizer: SentencePiece's tokenizer.model and Hugging
// Face's tokenizer.json. Internal to runtime/text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hap::text_internal {

class TokenizerImpl {
 public:
  virtual ~TokenizerImpl() = default;

  // Ids of `text` without the post-processor's BOS/EOS. `recognize_special`: whether special
  // added tokens spelled in the text become their ids (otherwise they are text).
  virtual std::vector<int32_t> Encode(std::string_view text, bool recognize_special) const = 0;
  // Text of `ids`, every one in [0, vocab_size()); special tokens decode to "".
  virtual std::string Decode(const std::vector<int>& ids) const = 0;

  // One past the largest id the tokenizer knows (pieces and added tokens).
  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;  // -1 when the tokenizer has none
  virtual int eos_id() const = 0;
  virtual int unk_id() const = 0;
  // The id of a piece or added token spelled `piece`; unk_id() when there is none.
  virtual int PieceToId(std::string_view piece) const = 0;
  // The piece or added token's text as the vocabulary spells it; "" when `id` has none.
  virtual std::string IdToPiece(int id) const = 0;
  // Whether `id` decodes to raw bytes that join with its neighbours' (SentencePiece's and
  // ByteFallback's <0xNN> pieces, every piece of a byte-level BPE); appends them to `bytes`.
  virtual bool PieceBytes(int id, std::string* bytes) const = 0;
  // Whether `id` is a special token (BOS, EOS, unk, control and special added tokens).
  virtual bool IsSpecial(int id) const = 0;
};

}  // namespace hap::text_internal
