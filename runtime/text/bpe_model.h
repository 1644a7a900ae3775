// The BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE", ...}) with the
// semantics of the tokenizers library: a word's characters are looked up in the vocabulary
// (byte_fallback: an unknown character becomes its <0xNN> pieces; otherwise unk, fused runs
// with fuse_unk), then the adjacent pair of lowest merge rank is merged, the leftmost among
// equals, until no pair has a merge. Internal to runtime/text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace hap::text_internal {

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" object; errors name `source` and the field.
  static absl::StatusOr<BpeModel> FromJson(const nlohmann::json& model, const std::string& source);

  // Appends the ids of one pre-tokenized word (UTF-8) to `ids`.
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;

  // -1 when `token` is not in the vocabulary.
  int TokenToId(std::string_view token) const;
  // The largest id plus one.
  int size() const { return static_cast<int>(id_to_token_.size()); }
  // "" for ids without a token (gaps in the vocabulary).
  const std::string& IdToToken(int id) const;
  int unk_id() const { return unk_id_; }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  struct Merge {
    int rank;
    int merged_id;
  };
  static uint64_t PairKey(int left, int right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  // The symbols a word starts as: one per character (with the subword prefix/suffix), byte
  // pieces or unk where a character is not in the vocabulary.
  void InitialSymbols(std::string_view word, std::vector<int>* symbols) const;

  std::unordered_map<std::string, int> token_to_id_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  int byte_ids_[256];  // <0xNN> piece ids, -1 where absent
  int unk_id_ = -1;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
};

}  // namespace hap::text_internal
