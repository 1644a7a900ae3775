// Tokenizer: absl::Status-returning facade over the SentencePiece wrapper.
#include "runtime/text/tokenizer.h"

#include <sys/stat.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/text/sentencepiece_model.h"

namespace hap {

namespace {

// SentencePiece writes the word-boundary marker as U+2581 ("▁").
constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";

// "<0x41>" → 0x41; -1 when `piece` is not in that form.
int ParseBytePiece(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = piece[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<text_internal::SentencePieceModel> sp) : sp_(std::move(sp)) {
  vocab_size_ = sp_->PieceSize();
}

Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& model_path) {
  struct stat st;
  if (stat(model_path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("tokenizer model not found: ", model_path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer model is not a regular file: ", model_path));
  }
  auto sp = std::make_unique<text_internal::SentencePieceModel>();
  const std::string error = sp->Load(model_path);
  if (!error.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load tokenizer model ", model_path, ": ", error));
  }
  if (sp->PieceSize() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer model ", model_path, " has an empty vocabulary"));
  }
  std::unique_ptr<Tokenizer> tok(new Tokenizer(std::move(sp)));

  // The streaming detokenizer needs one ordinary piece to stand in for "text already emitted";
  // any trained vocabulary has single characters, so a model without one is not a real model.
  for (int id = 0; id < tok->vocab_size_; ++id) {
    const auto& sp_model = *tok->sp_;
    if (sp_model.IsByte(id) || sp_model.IsControl(id) || sp_model.IsUnknown(id) ||
        sp_model.IsUnused(id)) {
      continue;
    }
    const std::string& piece = sp_model.IdToPiece(id);
    if (piece.empty() || piece.find(kSpaceSymbol) != std::string::npos) continue;
    std::string text;
    if (!sp_model.Decode({id}, &text).empty() || text != piece) continue;
    tok->anchor_id_ = id;
    tok->anchor_text_ = text;
    break;
  }
  if (tok->anchor_id_ < 0) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer model ", model_path,
                                                   " has no ordinary (non-space, non-byte) piece"));
  }
  return tok;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text) const {
  std::vector<int> ids;
  // SentencePiece only fails here on an unloaded model, which Load rules out.
  if (!sp_->Encode(text, &ids).empty()) return {};
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string Tokenizer::DecodeInVocab(const std::vector<int>& ids) const {
  std::string text;
  // Cannot fail once every id is in range.
  if (!sp_->Decode(ids, &text).empty()) return {};
  return text;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::vector<int> in_vocab;
  in_vocab.reserve(ids.size());
  for (int32_t id : ids) {
    if (InVocab(id)) in_vocab.push_back(id);
  }
  return DecodeInVocab(in_vocab);
}

std::string Tokenizer::DecodeContinuation(const std::vector<int>& ids) const {
  std::vector<int> anchored;
  anchored.reserve(ids.size() + 1);
  anchored.push_back(anchor_id_);
  anchored.insert(anchored.end(), ids.begin(), ids.end());
  std::string text = DecodeInVocab(anchored);
  // The anchor is an ordinary piece, so its surface always leads the decoded text.
  return text.size() >= anchor_text_.size() ? text.substr(anchor_text_.size()) : std::string();
}

int Tokenizer::bos_id() const { return sp_->BosId(); }
int Tokenizer::eos_id() const { return sp_->EosId(); }
int Tokenizer::unk_id() const { return sp_->UnkId(); }
int Tokenizer::vocab_size() const { return vocab_size_; }
int Tokenizer::PieceToId(std::string_view piece) const { return sp_->PieceToId(piece); }

std::string Tokenizer::IdToPiece(int id) const {
  return InVocab(id) ? sp_->IdToPiece(id) : std::string();
}

bool Tokenizer::IsBytePiece(int id) const {
  return InVocab(id) && sp_->IsByte(id) && ParseBytePiece(sp_->IdToPiece(id)) >= 0;
}

uint8_t Tokenizer::ByteValue(int id) const {
  return static_cast<uint8_t>(ParseBytePiece(sp_->IdToPiece(id)));
}

}  // namespace hap
