// TokenizerJsonFromSentencePiece: the SentencePiece pieces and scores as a tokenizers-library
// BPE, checked against SentencePiece on a probe text before it is returned.
#include "runtime/text/tokenizer_json_writer.h"

#include <algorithm>
#include <tuple>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "runtime/text/hf_tokenizer.h"
#include "runtime/text/sentencepiece_model.h"
#include "runtime/text/unicode.h"

namespace hap {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kSpace[] = "\xE2\x96\x81";  // '▁'

// Spaces in runs and at the ends, tabs and newlines, digits, punctuation, accents, CJK and an
// emoji (byte fallback in a small vocabulary), fullwidth letters (which NFKC would change) and
// special-token spellings, which must stay text.
constexpr char kProbe[] =
    "  Hello,  world!\tThe 2 cats & 31 dogs\n\nsat on\r\nthe mat.  caf\xC3\xA9 \xE4\xB8\xAD\xE6"
    "\x96\x87 \xF0\x9F\x98\x80 \xEF\xBC\xA1\xEF\xBC\xA2 <s> </s> <unk> x  ";

Json SpecialToken(int id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

}  // namespace

absl::StatusOr<std::string> TokenizerJsonFromSentencePiece(
    const std::string& model_path, const std::vector<ExtraAddedToken>& extra) {
  text_internal::SentencePieceModel sp;
  if (const std::string error = sp.Load(model_path); !error.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load tokenizer model ", model_path, ": ", error));
  }
  const int n = sp.PieceSize();
  std::unordered_map<std::string, int> id_of;
  Json vocab = Json::object();
  for (int id = 0; id < n; ++id) {
    id_of.emplace(sp.IdToPiece(id), id);
    vocab[sp.IdToPiece(id)] = id;
  }

  // Every way to write a normal piece as two pieces is a merge, ranked by the merged piece's
  // score (SentencePiece merges the pair whose result scores highest), then by its id.
  struct Candidate {
    float score;
    int merged, left, right;
  };
  std::vector<Candidate> candidates;
  for (int id = 0; id < n; ++id) {
    if (sp.IsControl(id) || sp.IsUnknown(id) || sp.IsUnused(id) || sp.IsByte(id)) continue;
    const std::u32string chars = unicode::DecodeUtf8(sp.IdToPiece(id));
    for (size_t k = 1; k < chars.size(); ++k) {
      const auto left = id_of.find(unicode::EncodeUtf8(chars.substr(0, k)));
      const auto right = id_of.find(unicode::EncodeUtf8(chars.substr(k)));
      if (left == id_of.end() || right == id_of.end()) continue;
      candidates.push_back({sp.GetScore(id), id, left->second, right->second});
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     return std::tie(b.score, a.merged) < std::tie(a.score, b.merged);
                   });
  Json merges = Json::array();
  for (const Candidate& c : candidates) {
    merges.push_back(Json::array({sp.IdToPiece(c.left), sp.IdToPiece(c.right)}));
  }

  Json added = Json::array();
  for (int id : {sp.UnkId(), sp.BosId(), sp.EosId()}) {
    if (id >= 0) added.push_back(SpecialToken(id, sp.IdToPiece(id)));
  }
  for (const ExtraAddedToken& t : extra) {
    if (t.id < n) {
      return absl::InvalidArgumentError(absl::StrCat("added token \"", t.content, "\" has id ",
                                                     t.id, ", inside ", model_path,
                                                     "'s vocabulary of ", n));
    }
    added.push_back(SpecialToken(t.id, t.content));
  }

  const std::string bos = sp.BosId() >= 0 ? sp.IdToPiece(sp.BosId()) : "";
  Json post_processor = nullptr;
  if (!bos.empty()) {
    const Json bos_item = {{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
    post_processor = {
        {"type", "TemplateProcessing"},
        {"single", Json::array({bos_item, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", Json::array({bos_item,
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
                              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens",
         {{bos,
           {{"id", bos}, {"ids", Json::array({sp.BosId()})}, {"tokens", Json::array({bos})}}}}}};
  }

  Json file = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         Json::array(
             {{{"type", "Prepend"}, {"prepend", kSpace}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", post_processor},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         Json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", sp.UnkId() >= 0 ? Json(sp.IdToPiece(sp.UnkId())) : Json(nullptr)},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}}};
  std::string text = file.dump(2, ' ', /*ensure_ascii=*/false) + "\n";

  // The same ids as SentencePiece on the probe, or the model is not one this form describes.
  HAP_ASSIGN_OR_RETURN(auto hf,
                       text_internal::HfTokenizer::Parse(text, "", model_path + " (converted)"));
  std::vector<int> want;
  if (const std::string error = sp.Encode(kProbe, &want); !error.empty()) {
    return absl::InternalError(absl::StrCat(model_path, ": ", error));
  }
  const std::vector<int32_t> got = hf->Encode(kProbe, /*recognize_special=*/false);
  if (std::vector<int>(got.begin(), got.end()) != want) {
    return absl::FailedPreconditionError(absl::StrCat(
        model_path,
        " is not a SentencePiece BPE model with identity normalization and the dummy prefix: "
        "its tokenizer.json form encodes a probe text as [",
        absl::StrJoin(got, ", "), "] where SentencePiece gives [", absl::StrJoin(want, ", "), "]"));
  }
  return text;
}

}  // namespace hap
