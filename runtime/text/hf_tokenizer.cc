// HfTokenizer: tokenizer.json's components (hf_components.h), parsed once and applied per
// request in the order the tokenizers library applies them: added tokens split off the raw
// text, the normalizer on each remaining segment, added tokens written in normalized form split
// off next, the pre-tokenizer, then the BPE model on each word.
#include "runtime/text/hf_tokenizer.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "runtime/text/hf_components.h"
#include "runtime/text/unicode.h"

namespace hap::text_internal {

namespace {

bool IsWordChar(char32_t c) { return unicode::IsLetter(c) || unicode::IsNumber(c) || c == U'_'; }

// The post-processor's special tokens before and after the sequence, for one sequence.
absl::Status ParsePostProcessor(const json& j, const std::string& path, const std::string& source,
                                const std::function<int(const std::string&)>& id_of,
                                std::vector<int32_t>* prefix, std::vector<int32_t>* suffix) {
  HAP_ASSIGN_OR_RETURN(const std::string type, StringField(j, "type", path, source));
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array()) {
      return FieldError(source, path + ".processors", "must be a list");
    }
    for (size_t i = 0; i < j["processors"].size(); ++i) {
      HAP_RETURN_IF_ERROR(ParsePostProcessor(j["processors"][i],
                                             absl::StrCat(path, ".processors[", i, "]"), source,
                                             id_of, prefix, suffix));
    }
    return absl::OkStatus();
  }
  if (type == "ByteLevel") return absl::OkStatus();  // offsets only
  if (type == "TemplateProcessing") {
    if (!j.contains("single") || !j["single"].is_array()) {
      return FieldError(source, path + ".single", "must be a list");
    }
    const json& specials = j.value("special_tokens", json::object());
    bool seen_sequence = false;
    for (size_t i = 0; i < j["single"].size(); ++i) {
      const json& item = j["single"][i];
      const std::string item_path = absl::StrCat(path, ".single[", i, "]");
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id") ||
          !item["SpecialToken"]["id"].is_string()) {
        return FieldError(source, item_path,
                          absl::StrCat("must be {\"Sequence\": ...} or {\"SpecialToken\": "
                                       "{\"id\": ...}}, got ",
                                       Brief(item)));
      }
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      std::vector<int32_t> ids;
      if (specials.contains(name) && specials[name].contains("ids") &&
          specials[name]["ids"].is_array()) {
        for (const json& id : specials[name]["ids"]) {
          if (!id.is_number_integer()) {
            return FieldError(source, absl::StrCat(path, ".special_tokens[\"", name, "\"].ids"),
                              "must be a list of ids");
          }
          ids.push_back(id.get<int32_t>());
        }
      } else {
        const int id = id_of(name);
        if (id < 0) {
          return FieldError(source, item_path,
                            absl::StrCat("names \"", name, "\", which is not in the vocabulary"));
        }
        ids.push_back(id);
      }
      std::vector<int32_t>& side = seen_sequence ? *suffix : *prefix;
      side.insert(side.end(), ids.begin(), ids.end());
    }
    return absl::OkStatus();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      if (!j.contains(key) || !j[key].is_array() || j[key].size() != 2 ||
          !j[key][1].is_number_integer()) {
        return FieldError(source, absl::StrCat(path, ".", key), "must be [token, id]");
      }
    }
    prefix->push_back(j["cls"][1].get<int32_t>());
    suffix->push_back(j["sep"][1].get<int32_t>());
    return absl::OkStatus();
  }
  return FieldError(source, path + ".type",
                    absl::StrCat("\"", type,
                                 "\" is not a supported post-processor (supported: Sequence, "
                                 "ByteLevel, TemplateProcessing, RobertaProcessing, "
                                 "BertProcessing)"));
}

// tokenizer_config.json's bos_token/eos_token: a string, an AddedToken dict, or null.
absl::StatusOr<std::string> ConfigToken(const json& config, const char* key,
                                        const std::string& source) {
  if (!config.contains(key) || config[key].is_null()) return std::string();
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return FieldError(source, key,
                    absl::StrCat("must be a string or {\"content\": ...}, got ", Brief(v)));
}

}  // namespace

HfTokenizer::HfTokenizer() = default;
HfTokenizer::~HfTokenizer() = default;

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Parse(std::string_view json_text,
                                                                std::string_view config_text,
                                                                const std::string& source) {
  const json j = json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, " is not a JSON object"));
  }
  std::unique_ptr<HfTokenizer> tok(new HfTokenizer());
  if (!j.contains("model")) return FieldError(source, "model", "is missing");
  HAP_ASSIGN_OR_RETURN(tok->model_, BpeModel::FromJson(j["model"], source));
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    HAP_ASSIGN_OR_RETURN(tok->normalizer_,
                         HfNormalizer::Parse(j["normalizer"], "normalizer", source));
  }
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) {
    HAP_ASSIGN_OR_RETURN(tok->pre_tokenizer_,
                         HfPreTokenizer::Parse(j["pre_tokenizer"], "pre_tokenizer", source));
  }
  if (j.contains("decoder") && !j["decoder"].is_null()) {
    HAP_ASSIGN_OR_RETURN(tok->decoder_, HfDecoder::Parse(j["decoder"], "decoder", source));
  }

  tok->id_to_token_.resize(tok->model_.size());
  for (int id = 0; id < tok->model_.size(); ++id) tok->id_to_token_[id] = tok->model_.IdToToken(id);
  const json added = j.value("added_tokens", json::array());
  if (!added.is_array()) return FieldError(source, "added_tokens", "must be a list");
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string path = absl::StrCat("added_tokens[", i, "]");
    const json& a = added[i];
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        a["id"].get<int64_t>() < 0 || a["id"].get<int64_t>() > (1 << 30)) {
      return FieldError(source, path, "must be an object with a non-negative \"id\"");
    }
    AddedToken t;
    t.id = a["id"].get<int>();
    HAP_ASSIGN_OR_RETURN(const std::string content, StringField(a, "content", path, source));
    if (content.empty()) return FieldError(source, path + ".content", "must not be empty");
    HAP_ASSIGN_OR_RETURN(t.special, BoolField(a, "special", path, source, false));
    HAP_ASSIGN_OR_RETURN(t.normalized, BoolField(a, "normalized", path, source, !t.special));
    HAP_ASSIGN_OR_RETURN(t.single_word, BoolField(a, "single_word", path, source, false));
    HAP_ASSIGN_OR_RETURN(t.lstrip, BoolField(a, "lstrip", path, source, false));
    HAP_ASSIGN_OR_RETURN(t.rstrip, BoolField(a, "rstrip", path, source, false));
    t.content = unicode::DecodeUtf8(content);
    // Without a normalizer there is no normalized form to match.
    if (!tok->normalizer_) t.normalized = false;
    if (t.normalized) tok->normalizer_->Apply(&t.content);
    if (t.id >= static_cast<int>(tok->id_to_token_.size())) tok->id_to_token_.resize(t.id + 1);
    tok->id_to_token_[t.id] = content;
    tok->added_ids_[content] = t.id;
    tok->added_.push_back(std::move(t));
  }
  tok->special_.assign(tok->id_to_token_.size(), false);
  for (const AddedToken& t : tok->added_) tok->special_[t.id] = t.special;

  // Which pieces decode as raw bytes (for streaming: a character may span pieces).
  tok->byte_level_piece_.assign(tok->id_to_token_.size(), false);
  tok->byte_fallback_decoder_ = tok->decoder_ && tok->decoder_->Has(HfDecoder::Kind::kByteFallback);
  if (tok->decoder_ && tok->decoder_->Has(HfDecoder::Kind::kByteLevel)) {
    for (int id = 0; id < tok->model_.size(); ++id) {
      tok->byte_level_piece_[id] =
          !tok->added_ids_.count(tok->id_to_token_[id]) && !tok->id_to_token_[id].empty();
    }
  }

  auto id_of = [&](const std::string& name) { return tok->PieceToIdOrMinusOne(name); };
  if (j.contains("post_processor") && !j["post_processor"].is_null()) {
    HAP_RETURN_IF_ERROR(ParsePostProcessor(j["post_processor"], "post_processor", source, id_of,
                                           &tok->template_prefix_, &tok->template_suffix_));
  }

  // BOS and EOS: tokenizer_config.json names them; without it, the template's first special
  // token is taken for BOS and EOS stays unknown.
  if (!config_text.empty()) {
    const std::string config_source = absl::StrCat(source, "'s tokenizer_config.json");
    const json config = json::parse(config_text.begin(), config_text.end(), nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(config_source, " is not a JSON object"));
    }
    HAP_ASSIGN_OR_RETURN(const std::string bos, ConfigToken(config, "bos_token", config_source));
    HAP_ASSIGN_OR_RETURN(const std::string eos, ConfigToken(config, "eos_token", config_source));
    for (const auto& [name, out] : {std::pair{bos, &tok->bos_id_}, std::pair{eos, &tok->eos_id_}}) {
      if (name.empty()) continue;
      *out = id_of(name);
      if (*out < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            config_source, " names \"", name, "\", which is not in ", source, "'s vocabulary"));
      }
    }
  } else if (!tok->template_prefix_.empty()) {
    tok->bos_id_ = tok->template_prefix_.front();
  }
  return tok;
}

int HfTokenizer::PieceToIdOrMinusOne(std::string_view piece) const {
  const auto it = added_ids_.find(std::string(piece));
  if (it != added_ids_.end()) return it->second;
  return model_.TokenToId(piece);
}

int HfTokenizer::PieceToId(std::string_view piece) const {
  const int id = PieceToIdOrMinusOne(piece);
  return id >= 0 ? id : model_.unk_id();
}

std::string HfTokenizer::IdToPiece(int id) const {
  return id >= 0 && id < vocab_size() ? id_to_token_[id] : std::string();
}

bool HfTokenizer::IsSpecial(int id) const { return id >= 0 && id < vocab_size() && special_[id]; }

bool HfTokenizer::PieceBytes(int id, std::string* bytes) const {
  if (id < 0 || id >= vocab_size()) return false;
  if (byte_level_piece_[id]) {
    const std::optional<std::string> b = ByteLevelBytes(id_to_token_[id]);
    if (!b) return false;
    *bytes += *b;
    return true;
  }
  if (byte_fallback_decoder_) {
    const int b = FallbackByte(id_to_token_[id]);
    if (b < 0) return false;
    bytes->push_back(static_cast<char>(b));
    return true;
  }
  return false;
}

void HfTokenizer::SplitAdded(bool normalized, bool recognize_special,
                             std::vector<Segment>* segments) const {
  std::vector<const AddedToken*> candidates;
  for (const AddedToken& t : added_) {
    if (t.normalized == normalized && (recognize_special || !t.special)) candidates.push_back(&t);
  }
  if (candidates.empty()) return;
  // Longest first, so the first match at a position is the leftmost-longest one.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const AddedToken* a, const AddedToken* b) {
                     return a->content.size() > b->content.size();
                   });

  std::vector<Segment> out;
  for (Segment& seg : *segments) {
    if (seg.added_id >= 0) {
      out.push_back(std::move(seg));
      continue;
    }
    const std::u32string& s = seg.text;
    size_t text_begin = 0;  // start of the text not yet emitted
    bool at_start = seg.at_start;
    size_t i = 0;
    while (i < s.size()) {
      const AddedToken* hit = nullptr;
      for (const AddedToken* t : candidates) {
        if (s.compare(i, t->content.size(), t->content) != 0) continue;
        const size_t end = i + t->content.size();
        if (t->single_word &&
            ((i > 0 && IsWordChar(s[i - 1])) || (end < s.size() && IsWordChar(s[end])))) {
          continue;
        }
        hit = t;
        break;
      }
      if (hit == nullptr) {
        ++i;
        continue;
      }
      size_t b = i, e = i + hit->content.size();
      while (hit->lstrip && b > text_begin && unicode::IsWhitespace(s[b - 1])) --b;
      while (hit->rstrip && e < s.size() && unicode::IsWhitespace(s[e])) ++e;
      if (b > text_begin) {
        out.push_back({s.substr(text_begin, b - text_begin), -1, at_start && text_begin == 0});
      }
      out.push_back({std::u32string(), hit->id, false});
      text_begin = i = e;
    }
    if (text_begin < s.size()) {
      out.push_back({s.substr(text_begin), -1, at_start && text_begin == 0});
    }
  }
  *segments = std::move(out);
}

void HfTokenizer::EncodeSegment(const Segment& segment, std::vector<int32_t>* ids) const {
  std::vector<Piece> pieces = {{segment.text, segment.at_start}};
  if (pre_tokenizer_) pre_tokenizer_->Apply(&pieces);
  for (const Piece& p : pieces) model_.EncodeWord(unicode::EncodeUtf8(p.text), ids);
}

std::vector<int32_t> HfTokenizer::Encode(std::string_view text, bool recognize_special) const {
  std::vector<Segment> segments = {{unicode::DecodeUtf8(text), -1, true}};
  SplitAdded(/*normalized=*/false, recognize_special, &segments);
  if (normalizer_) {
    for (Segment& seg : segments) {
      if (seg.added_id < 0) normalizer_->Apply(&seg.text);
    }
    SplitAdded(/*normalized=*/true, recognize_special, &segments);
  }
  std::vector<int32_t> ids;
  for (const Segment& seg : segments) {
    if (seg.added_id >= 0) {
      ids.push_back(seg.added_id);
    } else if (!seg.text.empty()) {
      EncodeSegment(seg, &ids);
    }
  }
  return ids;
}

std::vector<int32_t> HfTokenizer::AddSpecialTokens(const std::vector<int32_t>& ids) const {
  std::vector<int32_t> out = template_prefix_;
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), template_suffix_.begin(), template_suffix_.end());
  return out;
}

std::string HfTokenizer::Decode(const std::vector<int>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int id : ids) {
    if (IsSpecial(id)) continue;
    std::string t = IdToPiece(id);
    if (!t.empty()) tokens.push_back(std::move(t));
  }
  if (!decoder_) return absl::StrJoin(tokens, " ");
  decoder_->Apply(&tokens);
  return absl::StrJoin(tokens, "");
}

}  // namespace hap::text_internal
