// HfNormalizer, HfPreTokenizer, HfDecoder: tokenizer.json's components, each parsed from its
// JSON object and applied with the tokenizers library's semantics.
#include "runtime/text/hf_components.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/text/byte_level.h"
#include "runtime/text/unicode.h"

namespace hap::text_internal {

std::string Brief(const json& j) {
  std::string s = j.dump();
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

absl::Status FieldError(const std::string& source, const std::string& path,
                        const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", path, " ", what));
}

absl::StatusOr<std::string> StringField(const json& obj, const char* key, const std::string& path,
                                        const std::string& source, std::string fallback) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  if (!obj[key].is_string()) {
    return FieldError(source, absl::StrCat(path, ".", key),
                      absl::StrCat("must be a string, got ", Brief(obj[key])));
  }
  return obj[key].get<std::string>();
}

absl::StatusOr<bool> BoolField(const json& obj, const char* key, const std::string& path,
                               const std::string& source, bool fallback) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  if (!obj[key].is_boolean()) {
    return FieldError(source, absl::StrCat(path, ".", key),
                      absl::StrCat("must be true or false, got ", Brief(obj[key])));
  }
  return obj[key].get<bool>();
}

absl::StatusOr<int> IntField(const json& obj, const char* key, const std::string& path,
                             const std::string& source, int fallback) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  if (!obj[key].is_number_integer() || obj[key].get<int64_t>() < 0 ||
      obj[key].get<int64_t>() > (1 << 30)) {
    return FieldError(source, absl::StrCat(path, ".", key),
                      absl::StrCat("must be a non-negative integer, got ", Brief(obj[key])));
  }
  return obj[key].get<int>();
}

namespace {

// GPT-2's pre-tokenizer pattern, which ByteLevel applies when use_regex is set.
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A single character given as a string (Metaspace's replacement, Strip's content).
absl::StatusOr<char32_t> CharField(const json& obj, const char* key, const std::string& path,
                                   const std::string& source, char32_t fallback) {
  HAP_ASSIGN_OR_RETURN(const std::string s, StringField(obj, key, path, source));
  if (s.empty() && !obj.contains(key)) return fallback;
  const std::u32string c = unicode::DecodeUtf8(s);
  if (c.size() != 1) {
    return FieldError(source, absl::StrCat(path, ".", key),
                      absl::StrCat("must be one character, got \"", s, "\""));
  }
  return c[0];
}

absl::StatusOr<Pattern> ParsePattern(const json& obj, const std::string& path,
                                     const std::string& source) {
  const std::string field = absl::StrCat(path, ".pattern");
  if (!obj.contains("pattern") || !obj["pattern"].is_object() || obj["pattern"].size() != 1) {
    return FieldError(source, field, "must be {\"String\": ...} or {\"Regex\": ...}");
  }
  const json& p = obj["pattern"];
  Pattern out;
  if (p.contains("String") && p["String"].is_string()) {
    out.literal = unicode::DecodeUtf8(p["String"].get<std::string>());
    return out;
  }
  if (p.contains("Regex") && p["Regex"].is_string()) {
    absl::StatusOr<PretokenizeRegex> regex =
        PretokenizeRegex::Compile(p["Regex"].get<std::string>());
    if (!regex.ok()) {
      return FieldError(source, field, std::string(regex.status().message()));
    }
    out.regex.emplace(*std::move(regex));
    return out;
  }
  return FieldError(source, field,
                    absl::StrCat("must be {\"String\": ...} or {\"Regex\": ...}, got ", Brief(p)));
}

// A Sequence's members: the list j[key], each parsed with T::Parse at "<path>.<key>[i]".
template <typename T>
absl::Status ParseSequence(const json& j, const char* key, const std::string& path,
                           const std::string& source, std::vector<std::unique_ptr<T>>& children) {
  if (!j.contains(key) || !j[key].is_array()) {
    return FieldError(source, absl::StrCat(path, ".", key), "must be a list");
  }
  for (size_t i = 0; i < j[key].size(); ++i) {
    HAP_ASSIGN_OR_RETURN(auto child,
                         T::Parse(j[key][i], absl::StrCat(path, ".", key, "[", i, "]"), source));
    children.push_back(std::move(child));
  }
  return absl::OkStatus();
}

// Metaspace's prepend_scheme (always, first or never). Files before tokenizers 0.15 say
// add_prefix_space instead.
absl::StatusOr<std::string> PrependScheme(const json& j, const std::string& path,
                                          const std::string& source) {
  HAP_ASSIGN_OR_RETURN(const bool add_prefix, BoolField(j, "add_prefix_space", path, source, true));
  return StringField(j, "prepend_scheme", path, source, add_prefix ? "always" : "never");
}

}  // namespace

// The piece's bytes when every character is a byte-level character.
std::optional<std::string> ByteLevelBytes(const std::string& token) {
  std::string bytes;
  for (char32_t c : unicode::DecodeUtf8(token)) {
    const int b = ByteLevelByte(c);
    if (b < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(b));
  }
  return bytes;
}

// "<0xNN>" → NN; -1 for anything else.
int FallbackByte(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = token[i];
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                             : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// ---------------------------------------------------------------------------------------------
// Normalizers.

void HfNormalizer::Apply(std::u32string* s) const {
  switch (kind) {
    case Kind::kSequence:
      for (const auto& child : children) child->Apply(s);
      return;
    case Kind::kNfc:
      *s = unicode::Nfc(*s);
      return;
    case Kind::kPrepend:
      if (!s->empty()) *s = text + *s;
      return;
    case Kind::kReplace:
      *s = pattern.ReplaceAll(*s, text);
      return;
    case Kind::kStrip: {
      size_t b = 0, e = s->size();
      while (left && b < e && unicode::IsWhitespace((*s)[b])) ++b;
      while (right && e > b && unicode::IsWhitespace((*s)[e - 1])) --e;
      *s = s->substr(b, e - b);
      return;
    }
  }
}

absl::StatusOr<std::unique_ptr<HfNormalizer>> HfNormalizer::Parse(const json& j,
                                                                  const std::string& path,
                                                                  const std::string& source) {
  auto n = std::make_unique<HfNormalizer>();
  HAP_ASSIGN_OR_RETURN(const std::string type, StringField(j, "type", path, source));
  if (type == "Sequence") {
    HAP_RETURN_IF_ERROR(ParseSequence(j, "normalizers", path, source, n->children));
  } else if (type == "NFC") {
    n->kind = Kind::kNfc;
  } else if (type == "Prepend") {
    n->kind = Kind::kPrepend;
    HAP_ASSIGN_OR_RETURN(const std::string prepend, StringField(j, "prepend", path, source));
    n->text = unicode::DecodeUtf8(prepend);
  } else if (type == "Replace") {
    n->kind = Kind::kReplace;
    HAP_ASSIGN_OR_RETURN(n->pattern, ParsePattern(j, path, source));
    HAP_ASSIGN_OR_RETURN(const std::string content, StringField(j, "content", path, source));
    n->text = unicode::DecodeUtf8(content);
  } else if (type == "Strip") {
    n->kind = Kind::kStrip;
    HAP_ASSIGN_OR_RETURN(n->left, BoolField(j, "strip_left", path, source, true));
    HAP_ASSIGN_OR_RETURN(n->right, BoolField(j, "strip_right", path, source, true));
  } else {
    return FieldError(source, path + ".type",
                      absl::StrCat("\"", type,
                                   "\" is not a supported normalizer (supported: Sequence, NFC, "
                                   "Prepend, Replace, Strip)"));
  }
  return n;
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers.

namespace {

// The library's split of one piece at `matches` (sorted, non-overlapping, non-empty) under
// `behavior`; empty pieces are dropped.
void SplitPiece(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                SplitBehavior behavior, bool invert, std::vector<Piece>* out) {
  struct Span {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Span> spans;
  size_t last = 0;
  for (const auto& [b, e] : matches) {
    if (b > last) spans.push_back({last, b, false});
    spans.push_back({b, e, true});
    last = e;
  }
  if (last < piece.text.size()) spans.push_back({last, piece.text.size(), false});
  if (invert) {
    for (Span& s : spans) s.is_match = !s.is_match;
  }

  std::vector<Span> merged;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) merged.push_back(s);
      }
      break;
    case SplitBehavior::kIsolated:
      merged = spans;
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !merged.empty()) {
          merged.back().end = s.end;
        } else {
          merged.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !merged.empty()) {
          merged.back().begin = it->begin;
        } else {
          merged.push_back(*it);
        }
        previous_match = it->is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !merged.empty()) {
          merged.back().end = s.end;
        } else {
          merged.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
  }
  for (const Span& s : merged) {
    if (s.end == s.begin) continue;
    out->push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_start && s.begin == 0});
  }
}

// Each character satisfying `pred` is a match of its own.
template <typename Pred>
std::vector<std::pair<size_t, size_t>> CharMatches(const std::u32string& text, Pred pred) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (pred(text[i])) out.emplace_back(i, i + 1);
  }
  return out;
}

}  // namespace

void HfPreTokenizer::Apply(std::vector<Piece>* pieces) const {
  if (kind == Kind::kSequence) {
    for (const auto& child : children) child->Apply(pieces);
    return;
  }
  std::vector<Piece> out;
  for (Piece& piece : *pieces) ApplyOne(&piece, &out);
  *pieces = std::move(out);
}

void HfPreTokenizer::ApplyOne(Piece* piece, std::vector<Piece>* out) const {
  switch (kind) {
    case Kind::kSequence:
      return;
    case Kind::kSplit:
      SplitPiece(*piece, pattern.Matches(piece->text), behavior, invert, out);
      return;
    case Kind::kDigits:
      SplitPiece(*piece, CharMatches(piece->text, unicode::IsNumber),
                 individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false,
                 out);
      return;
    case Kind::kWhitespaceSplit:
      SplitPiece(*piece, CharMatches(piece->text, unicode::IsWhitespace), SplitBehavior::kRemoved,
                 false, out);
      return;
    case Kind::kMetaspace: {
      for (char32_t& c : piece->text) {
        if (c == U' ') c = replacement;
      }
      const bool starts = !piece->text.empty() && piece->text[0] == replacement;
      if (!starts &&
          (prepend == Prepend::kAlways || (prepend == Prepend::kFirst && piece->at_start))) {
        piece->text.insert(piece->text.begin(), replacement);
      }
      if (!split) {
        out->push_back(std::move(*piece));
        return;
      }
      SplitPiece(*piece, CharMatches(piece->text, [this](char32_t c) { return c == replacement; }),
                 SplitBehavior::kMergedWithNext, false, out);
      return;
    }
    case Kind::kByteLevel: {
      if (add_prefix_space && (piece->text.empty() || piece->text[0] != U' ')) {
        piece->text.insert(piece->text.begin(), U' ');
      }
      std::vector<Piece> words;
      if (use_regex) {
        SplitPiece(*piece, pattern.Matches(piece->text), SplitBehavior::kIsolated, false, &words);
      } else {
        words.push_back(std::move(*piece));
      }
      for (Piece& w : words) {
        std::u32string mapped;
        for (char byte : unicode::EncodeUtf8(w.text)) {
          mapped.push_back(ByteLevelChar(static_cast<uint8_t>(byte)));
        }
        out->push_back({std::move(mapped), w.at_start});
      }
      return;
    }
  }
}

absl::StatusOr<std::unique_ptr<HfPreTokenizer>> HfPreTokenizer::Parse(const json& j,
                                                                      const std::string& path,
                                                                      const std::string& source) {
  auto p = std::make_unique<HfPreTokenizer>();
  HAP_ASSIGN_OR_RETURN(const std::string type, StringField(j, "type", path, source));
  if (type == "Sequence") {
    HAP_RETURN_IF_ERROR(ParseSequence(j, "pretokenizers", path, source, p->children));
  } else if (type == "Split") {
    p->kind = Kind::kSplit;
    HAP_ASSIGN_OR_RETURN(p->pattern, ParsePattern(j, path, source));
    HAP_ASSIGN_OR_RETURN(p->invert, BoolField(j, "invert", path, source, false));
    HAP_ASSIGN_OR_RETURN(const std::string behavior,
                         StringField(j, "behavior", path, source, "Isolated"));
    static const std::pair<const char*, SplitBehavior> kBehaviors[] = {
        {"Removed", SplitBehavior::kRemoved},
        {"Isolated", SplitBehavior::kIsolated},
        {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
        {"MergedWithNext", SplitBehavior::kMergedWithNext},
        {"Contiguous", SplitBehavior::kContiguous}};
    bool known = false;
    for (const auto& [name, value] : kBehaviors) {
      if (behavior == name) {
        p->behavior = value;
        known = true;
      }
    }
    if (!known) {
      return FieldError(source, path + ".behavior",
                        absl::StrCat("\"", behavior,
                                     "\" is not one of Removed, Isolated, MergedWithPrevious, "
                                     "MergedWithNext, Contiguous"));
    }
  } else if (type == "ByteLevel") {
    p->kind = Kind::kByteLevel;
    HAP_ASSIGN_OR_RETURN(p->add_prefix_space, BoolField(j, "add_prefix_space", path, source, true));
    HAP_ASSIGN_OR_RETURN(p->use_regex, BoolField(j, "use_regex", path, source, true));
    absl::StatusOr<PretokenizeRegex> gpt2 = PretokenizeRegex::Compile(kGpt2Pattern);
    if (!gpt2.ok()) return gpt2.status();
    p->pattern.regex.emplace(*std::move(gpt2));
  } else if (type == "Metaspace") {
    p->kind = Kind::kMetaspace;
    HAP_ASSIGN_OR_RETURN(p->replacement, CharField(j, "replacement", path, source, U'\u2581'));
    HAP_ASSIGN_OR_RETURN(p->split, BoolField(j, "split", path, source, true));
    HAP_ASSIGN_OR_RETURN(const std::string scheme, PrependScheme(j, path, source));
    if (scheme == "always") {
      p->prepend = Prepend::kAlways;
    } else if (scheme == "first") {
      p->prepend = Prepend::kFirst;
    } else if (scheme == "never") {
      p->prepend = Prepend::kNever;
    } else {
      return FieldError(source, path + ".prepend_scheme",
                        absl::StrCat("\"", scheme, "\" is not one of always, first, never"));
    }
  } else if (type == "Digits") {
    p->kind = Kind::kDigits;
    HAP_ASSIGN_OR_RETURN(p->individual_digits,
                         BoolField(j, "individual_digits", path, source, false));
  } else if (type == "WhitespaceSplit") {
    p->kind = Kind::kWhitespaceSplit;
  } else {
    return FieldError(source, path + ".type",
                      absl::StrCat("\"", type,
                                   "\" is not a supported pre-tokenizer (supported: Sequence, "
                                   "Split, ByteLevel, Metaspace, Digits, WhitespaceSplit)"));
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Decoders: each maps the list of token strings to a new list, as the library's decode_chain.

bool HfDecoder::Has(Kind k) const {
  if (kind == k) return true;
  for (const auto& c : children) {
    if (c->Has(k)) return true;
  }
  return false;
}

void HfDecoder::Apply(std::vector<std::string>* tokens) const {
  switch (kind) {
    case Kind::kSequence:
      for (const auto& child : children) child->Apply(tokens);
      return;
    case Kind::kByteLevel: {
      // All tokens' bytes joined, then read as UTF-8 with each invalid run replaced by U+FFFD.
      // A token with a character outside the byte map contributes its text as it is.
      std::string bytes;
      for (const std::string& t : *tokens) {
        const std::optional<std::string> b = ByteLevelBytes(t);
        bytes += b ? *b : t;
      }
      *tokens = {unicode::EncodeUtf8(unicode::DecodeUtf8(bytes))};
      return;
    }
    case Kind::kReplace:
      for (std::string& t : *tokens) {
        t = unicode::EncodeUtf8(pattern.ReplaceAll(unicode::DecodeUtf8(t), content));
      }
      return;
    case Kind::kByteFallback: {
      // A run of <0xNN> tokens becomes its text when the bytes are valid UTF-8, else one
      // U+FFFD per byte.
      std::vector<std::string> out;
      std::string run;
      auto flush = [&] {
        if (run.empty()) return;
        if (unicode::EncodeUtf8(unicode::DecodeUtf8(run)) == run) {
          out.push_back(run);
        } else {
          for (size_t i = 0; i < run.size(); ++i) out.push_back("\xEF\xBF\xBD");
        }
        run.clear();
      };
      for (std::string& t : *tokens) {
        const int b = FallbackByte(t);
        if (b >= 0) {
          run.push_back(static_cast<char>(b));
        } else {
          flush();
          out.push_back(std::move(t));
        }
      }
      flush();
      *tokens = std::move(out);
      return;
    }
    case Kind::kFuse: {
      std::string all;
      for (const std::string& t : *tokens) all += t;
      *tokens = {std::move(all)};
      return;
    }
    case Kind::kStrip:
      for (std::string& t : *tokens) {
        const std::u32string s = unicode::DecodeUtf8(t);
        size_t b = 0, e = s.size();
        for (int i = 0; i < strip_start && b < e && s[b] == strip_char; ++i) ++b;
        for (int i = 0; i < strip_stop && e > b && s[e - 1] == strip_char; ++i) --e;
        t = unicode::EncodeUtf8(std::u32string_view(s).substr(b, e - b));
      }
      return;
    case Kind::kMetaspace:
      // The library drops the replacement characters of the first token (the prefix it
      // prepended) and turns every other one into a space.
      for (size_t i = 0; i < tokens->size(); ++i) {
        std::u32string s;
        for (char32_t c : unicode::DecodeUtf8((*tokens)[i])) {
          if (c != replacement) {
            s.push_back(c);
          } else if (i != 0 || prepend_never) {
            s.push_back(U' ');
          }
        }
        (*tokens)[i] = unicode::EncodeUtf8(s);
      }
      return;
  }
}

absl::StatusOr<std::unique_ptr<HfDecoder>> HfDecoder::Parse(const json& j, const std::string& path,
                                                            const std::string& source) {
  auto d = std::make_unique<HfDecoder>();
  HAP_ASSIGN_OR_RETURN(const std::string type, StringField(j, "type", path, source));
  if (type == "Sequence") {
    HAP_RETURN_IF_ERROR(ParseSequence(j, "decoders", path, source, d->children));
  } else if (type == "ByteLevel") {
    d->kind = Kind::kByteLevel;
  } else if (type == "Replace") {
    d->kind = Kind::kReplace;
    HAP_ASSIGN_OR_RETURN(d->pattern, ParsePattern(j, path, source));
    HAP_ASSIGN_OR_RETURN(const std::string content, StringField(j, "content", path, source));
    d->content = unicode::DecodeUtf8(content);
  } else if (type == "ByteFallback") {
    d->kind = Kind::kByteFallback;
  } else if (type == "Fuse") {
    d->kind = Kind::kFuse;
  } else if (type == "Strip") {
    d->kind = Kind::kStrip;
    HAP_ASSIGN_OR_RETURN(d->strip_char, CharField(j, "content", path, source, U' '));
    HAP_ASSIGN_OR_RETURN(d->strip_start, IntField(j, "start", path, source, 0));
    HAP_ASSIGN_OR_RETURN(d->strip_stop, IntField(j, "stop", path, source, 0));
  } else if (type == "Metaspace") {
    d->kind = Kind::kMetaspace;
    HAP_ASSIGN_OR_RETURN(d->replacement, CharField(j, "replacement", path, source, U'\u2581'));
    HAP_ASSIGN_OR_RETURN(const std::string scheme, PrependScheme(j, path, source));
    d->prepend_never = scheme == "never";
  } else {
    return FieldError(source, path + ".type",
                      absl::StrCat("\"", type,
                                   "\" is not a supported decoder (supported: Sequence, "
                                   "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)"));
  }
  return d;
}

}  // namespace hap::text_internal
