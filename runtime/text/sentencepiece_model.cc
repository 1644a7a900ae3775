// SentencePieceProcessor calls, isolated from Abseil headers (see sentencepiece_model.h).
#include "runtime/text/sentencepiece_model.h"

#include <sentencepiece_processor.h>

namespace hap::text_internal {

SentencePieceModel::SentencePieceModel()
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SentencePieceModel::~SentencePieceModel() = default;

std::string SentencePieceModel::Load(const std::string& path) {
  const sentencepiece::util::Status s = sp_->Load(path);
  return s.ok() ? std::string() : s.ToString();
}

std::string SentencePieceModel::Encode(std::string_view text, std::vector<int>* ids) const {
  const sentencepiece::util::Status s = sp_->Encode(text, ids);
  return s.ok() ? std::string() : s.ToString();
}

std::string SentencePieceModel::Decode(const std::vector<int>& ids, std::string* text) const {
  const sentencepiece::util::Status s = sp_->Decode(ids, text);
  return s.ok() ? std::string() : s.ToString();
}

int SentencePieceModel::PieceSize() const { return sp_->GetPieceSize(); }
int SentencePieceModel::BosId() const { return sp_->bos_id(); }
int SentencePieceModel::EosId() const { return sp_->eos_id(); }
int SentencePieceModel::UnkId() const { return sp_->unk_id(); }
int SentencePieceModel::PieceToId(std::string_view piece) const { return sp_->PieceToId(piece); }
float SentencePieceModel::GetScore(int id) const { return sp_->GetScore(id); }
const std::string& SentencePieceModel::IdToPiece(int id) const { return sp_->IdToPiece(id); }
bool SentencePieceModel::IsByte(int id) const { return sp_->IsByte(id); }
bool SentencePieceModel::IsControl(int id) const { return sp_->IsControl(id); }
bool SentencePieceModel::IsUnknown(int id) const { return sp_->IsUnknown(id); }
bool SentencePieceModel::IsUnused(int id) const { return sp_->IsUnused(id); }

}  // namespace hap::text_internal
