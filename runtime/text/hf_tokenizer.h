// Hugging Face tokenizer.json (the tokenizers library's format) for BPE vocabularies: added
// tokens, normalizer, pre-tokenizer, BPE model, decoder and post-processor, each component with
// the library's semantics. Byte-level BPE (Qwen2, Llama 3) and SentencePiece-style BPE with
// byte fallback (Llama 2, llava-hf) are what VLM checkpoints ship. A component type this does
// not implement is refused at load with the type and the supported ones named, never ignored.
// Internal to runtime/text; hap::Tokenizer is the interface.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/text/bpe_model.h"
#include "runtime/text/tokenizer_impl.h"

namespace hap::text_internal {

struct HfNormalizer;
struct HfPreTokenizer;
struct HfDecoder;

class HfTokenizer final : public TokenizerImpl {
 public:
  // `json_text`: tokenizer.json; `config_text`: tokenizer_config.json or "" (it names the BOS
  // and EOS tokens). Errors name `source` and the field.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Parse(std::string_view json_text,
                                                            std::string_view config_text,
                                                            const std::string& source);
  ~HfTokenizer() override;

  std::vector<int32_t> Encode(std::string_view text, bool recognize_special) const override;
  std::string Decode(const std::vector<int>& ids) const override;
  int vocab_size() const override { return static_cast<int>(id_to_token_.size()); }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }
  int unk_id() const override { return model_.unk_id(); }
  int PieceToId(std::string_view piece) const override;
  std::string IdToPiece(int id) const override;
  bool PieceBytes(int id, std::string* bytes) const override;
  bool IsSpecial(int id) const override;

  // The post-processor's single-sequence template around `ids` (e.g. BOS first for Llama).
  std::vector<int32_t> AddSpecialTokens(const std::vector<int32_t>& ids) const;

 private:
  struct AddedToken {
    int id = -1;
    std::u32string content;  // as matched: normalized when `normalized` is set
    bool special = false;
    bool normalized = false;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
  };
  // A stretch of the input: either text for the pipeline or an added token's id.
  struct Segment {
    std::u32string text;
    int added_id = -1;
    bool at_start = false;  // begins at offset 0 of the input (Metaspace's "first")
  };

  HfTokenizer();
  int PieceToIdOrMinusOne(std::string_view piece) const;
  // Splits `segments`' text at the added tokens whose `normalized` flag is `normalized`.
  void SplitAdded(bool normalized, bool recognize_special, std::vector<Segment>* segments) const;
  void EncodeSegment(const Segment& segment, std::vector<int32_t>* ids) const;

  BpeModel model_;
  std::vector<AddedToken> added_;
  std::unordered_map<std::string, int> added_ids_;  // content as written → id
  std::vector<std::string> id_to_token_;            // model and added tokens
  std::vector<bool> special_;
  std::vector<bool> byte_level_piece_;  // the decoder reads the piece as byte-level chars
  bool byte_fallback_decoder_ = false;  // the decoder turns <0xNN> pieces into bytes
  std::unique_ptr<HfNormalizer> normalizer_;
  std::unique_ptr<HfPreTokenizer> pre_tokenizer_;
  std::unique_ptr<HfDecoder> decoder_;
  std::vector<int32_t> template_prefix_, template_suffix_;
  int bos_id_ = -1;
  int eos_id_ = -1;
};

}  // namespace hap::text_internal
