// Tokenizer: the absl::Status facade over tokenizer.json (HfTokenizer) and SentencePiece's
// tokenizer.model.
#include "runtime/text/tokenizer.h"

#include <sys/stat.h>

#include <filesystem>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "runtime/text/hf_components.h"
#include "runtime/text/hf_tokenizer.h"
#include "runtime/text/sentencepiece_model.h"
#include "runtime/text/tokenizer_impl.h"

namespace hap {

namespace {

// SentencePiece's tokenizer.model: no added tokens, so specials are never read from text.
class SentencePieceImpl final : public text_internal::TokenizerImpl {
 public:
  explicit SentencePieceImpl(std::unique_ptr<text_internal::SentencePieceModel> sp)
      : sp_(std::move(sp)) {}

  std::vector<int32_t> Encode(std::string_view text, bool /*recognize_special*/) const override {
    std::vector<int> ids;
    // SentencePiece only fails here on an unloaded model, which Load rules out.
    if (!sp_->Encode(text, &ids).empty()) return {};
    return std::vector<int32_t>(ids.begin(), ids.end());
  }
  std::string Decode(const std::vector<int>& ids) const override {
    std::string text;
    // Cannot fail once every id is in range.
    if (!sp_->Decode(ids, &text).empty()) return {};
    return text;
  }
  int vocab_size() const override { return sp_->PieceSize(); }
  int bos_id() const override { return sp_->BosId(); }
  int eos_id() const override { return sp_->EosId(); }
  int unk_id() const override { return sp_->UnkId(); }
  int PieceToId(std::string_view piece) const override { return sp_->PieceToId(piece); }
  std::string IdToPiece(int id) const override { return sp_->IdToPiece(id); }
  bool PieceBytes(int id, std::string* bytes) const override {
    if (!sp_->IsByte(id)) return false;
    const int b = text_internal::FallbackByte(sp_->IdToPiece(id));
    if (b < 0) return false;
    bytes->push_back(static_cast<char>(b));
    return true;
  }
  bool IsSpecial(int id) const override {
    return sp_->IsControl(id) || sp_->IsUnknown(id) || sp_->IsUnused(id);
  }

 private:
  std::unique_ptr<text_internal::SentencePieceModel> sp_;
};

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) == 0;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<text_internal::TokenizerImpl> impl, const char* format)
    : impl_(std::move(impl)), format_(format) {
  vocab_size_ = impl_->vocab_size();
}

Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("tokenizer not found: ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer is not a regular file: ", path));
  }
  std::unique_ptr<Tokenizer> tok;
  if (EndsWith(path, ".json")) {
    HAP_ASSIGN_OR_RETURN(const std::string json_text, ReadFileToString(path));
    const std::string config_path =
        (std::filesystem::path(path).parent_path() / "tokenizer_config.json").string();
    std::string config_text;
    if (stat(config_path.c_str(), &st) == 0) {
      HAP_ASSIGN_OR_RETURN(config_text, ReadFileToString(config_path));
    }
    HAP_ASSIGN_OR_RETURN(auto hf, text_internal::HfTokenizer::Parse(json_text, config_text, path));
    tok.reset(new Tokenizer(std::move(hf), "tokenizer.json"));
  } else {
    auto sp = std::make_unique<text_internal::SentencePieceModel>();
    const std::string error = sp->Load(path);
    if (!error.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot load tokenizer model ", path, ": ", error));
    }
    tok.reset(new Tokenizer(std::make_unique<SentencePieceImpl>(std::move(sp)), "tokenizer.model"));
  }
  if (tok->vocab_size_ <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer ", path, " has an empty vocabulary"));
  }
  HAP_RETURN_IF_ERROR(tok->FindAnchor(path));
  return tok;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadFromDirectory(const std::string& dir) {
  const std::filesystem::path d(dir);
  std::error_code ec;
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    if (std::filesystem::exists(d / name, ec)) return Load((d / name).string());
  }
  return absl::NotFoundError(
      absl::StrCat("no tokenizer in ", dir, ": expected tokenizer.json or tokenizer.model"));
}

absl::Status Tokenizer::FindAnchor(const std::string& path) {
  // The streaming detokenizer needs one ordinary piece to stand in for "text already emitted";
  // any trained vocabulary has single letters, so a tokenizer without one is not a real one.
  for (int id = 0; id < vocab_size_; ++id) {
    if (impl_->IsSpecial(id)) continue;
    const std::string piece = impl_->IdToPiece(id);
    if (piece.empty()) continue;
    bool plain = true;
    for (char c : piece) plain = plain && absl::ascii_isalnum(static_cast<unsigned char>(c));
    if (!plain || impl_->Decode({id}) != piece) continue;
    anchor_id_ = id;
    anchor_text_ = piece;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer ", path, " has no ordinary piece (letters or digits only)"));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, SpecialTokens specials) const {
  return impl_->Encode(text, specials == SpecialTokens::kRecognized);
}

std::string Tokenizer::DecodeInVocab(const std::vector<int>& ids) const {
  return impl_->Decode(ids);
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

int Tokenizer::bos_id() const { return impl_->bos_id(); }
int Tokenizer::eos_id() const { return impl_->eos_id(); }
int Tokenizer::unk_id() const { return impl_->unk_id(); }
int Tokenizer::vocab_size() const { return vocab_size_; }
int Tokenizer::PieceToId(std::string_view piece) const { return impl_->PieceToId(piece); }

std::string Tokenizer::IdToPiece(int id) const {
  return InVocab(id) ? impl_->IdToPiece(id) : std::string();
}

bool Tokenizer::PieceBytes(int id, std::string* bytes) const {
  return InVocab(id) && impl_->PieceBytes(id, bytes);
}

}  // namespace hap
