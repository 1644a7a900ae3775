// Thin wrapper over sentencepiece::SentencePieceProcessor, compiled in a translation unit that
// includes no Abseil header: Debian's sentencepiece_processor.h declares `absl::string_view` as
// an alias of std::string_view, which clashes with Debian Abseil's own absl::string_view class.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace hap::text_internal {

// Every method mirrors the SentencePieceProcessor method of the same name; failures come back
// as an error message (empty on success) so that this header stays free of Abseil types.
class SentencePieceModel {
 public:
  SentencePieceModel();
  ~SentencePieceModel();
  SentencePieceModel(const SentencePieceModel&) = delete;
  SentencePieceModel& operator=(const SentencePieceModel&) = delete;

  // Returns "" on success, else SentencePiece's message.
  std::string Load(const std::string& path);

  // Returns "" on success; `ids` holds the pieces.
  std::string Encode(std::string_view text, std::vector<int>* ids) const;
  // Every id must be in [0, PieceSize()). Returns "" on success.
  std::string Decode(const std::vector<int>& ids, std::string* text) const;

  int PieceSize() const;
  int BosId() const;
  int EosId() const;
  int UnkId() const;
  int PieceToId(std::string_view piece) const;
  float GetScore(int id) const;                // id must be in range
  const std::string& IdToPiece(int id) const;  // id must be in range
  bool IsByte(int id) const;
  bool IsControl(int id) const;
  bool IsUnknown(int id) const;
  bool IsUnused(int id) const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace hap::text_internal
