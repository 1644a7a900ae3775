// The components of a Hugging Face tokenizer.json (normalizer, pre-tokenizer, decoder), each
// parsed from its JSON object with errors naming the field, and applied with the tokenizers
// library's semantics. Internal to runtime/text (hf_tokenizer.h assembles them).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/text/pretokenize_regex.h"

namespace hap::text_internal {

using json = nlohmann::json;

// A JSON value for an error message, cut to 80 characters.
std::string Brief(const json& j);
// InvalidArgument "<source>: <path> <what>".
absl::Status FieldError(const std::string& source, const std::string& path,
                        const std::string& what);
// obj[key] as a string / bool; `fallback` when absent or null; an error naming path.key when
// it has another type.
absl::StatusOr<std::string> StringField(const json& obj, const char* key, const std::string& path,
                                        const std::string& source, std::string fallback = "");
absl::StatusOr<bool> BoolField(const json& obj, const char* key, const std::string& path,
                               const std::string& source, bool fallback);

// A byte-level BPE piece's bytes (GPT-2's map of bytes onto printable characters, reversed);
// nullopt when a character of `token` stands for no byte.
std::optional<std::string> ByteLevelBytes(const std::string& token);
// "<0xNN>" → NN; -1 for anything else.
int FallbackByte(const std::string& token);

// A component's "pattern": {"String": literal} or {"Regex": pattern}.
struct Pattern {
  std::u32string literal;
  std::optional<PretokenizeRegex> regex;

  // Non-overlapping matches [begin, end) in `text`, left to right; empty matches are skipped,
  // as the library's splitting drops them.
  std::vector<std::pair<size_t, size_t>> Matches(const std::u32string& text) const {
    std::vector<std::pair<size_t, size_t>> out;
    if (regex) {
      size_t from = 0, b = 0, e = 0;
      while (from <= text.size() && regex->Find(text, from, &b, &e)) {
        if (e == b) {
          from = b + 1;
          continue;
        }
        out.emplace_back(b, e);
        from = e;
      }
      return out;
    }
    if (literal.empty()) return out;
    for (size_t at = text.find(literal); at != std::u32string::npos;
         at = text.find(literal, at + literal.size())) {
      out.emplace_back(at, at + literal.size());
    }
    return out;
  }

  std::u32string ReplaceAll(const std::u32string& text, const std::u32string& content) const {
    std::u32string out;
    size_t last = 0;
    for (const auto& [b, e] : Matches(text)) {
      out.append(text, last, b - last);
      out += content;
      last = e;
    }
    out.append(text, last, std::u32string::npos);
    return out;
  }
};

// A stretch of text between the pre-tokenizer's splits.
struct Piece {
  std::u32string text;
  bool at_start = false;  // begins at offset 0 of the input (Metaspace's prepend_scheme "first")
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct HfNormalizer {
  enum class Kind { kSequence, kNfc, kPrepend, kReplace, kStrip };
  Kind kind = Kind::kSequence;
  std::vector<std::unique_ptr<HfNormalizer>> children;
  std::u32string text;               // Prepend's prefix, Replace's content
  Pattern pattern;                   // Replace
  bool left = false, right = false;  // Strip

  void Apply(std::u32string* s) const;

  static absl::StatusOr<std::unique_ptr<HfNormalizer>> Parse(const json& j, const std::string& path,
                                                             const std::string& source);
};

struct HfPreTokenizer {
  enum class Kind { kSequence, kSplit, kByteLevel, kMetaspace, kDigits, kWhitespaceSplit };
  enum class Prepend { kAlways, kFirst, kNever };
  Kind kind = Kind::kSequence;
  std::vector<std::unique_ptr<HfPreTokenizer>> children;
  Pattern pattern;  // Split; ByteLevel's GPT-2 pattern
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;     // ByteLevel
  bool use_regex = true;             // ByteLevel
  char32_t replacement = U'\u2581';  // Metaspace
  Prepend prepend = Prepend::kAlways;
  bool split = true;               // Metaspace
  bool individual_digits = false;  // Digits

  void Apply(std::vector<Piece>* pieces) const;

  void ApplyOne(Piece* piece, std::vector<Piece>* out) const;

  static absl::StatusOr<std::unique_ptr<HfPreTokenizer>> Parse(const json& j,
                                                               const std::string& path,
                                                               const std::string& source);
};

struct HfDecoder {
  enum class Kind { kSequence, kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace };
  Kind kind = Kind::kSequence;
  std::vector<std::unique_ptr<HfDecoder>> children;
  Pattern pattern;         // Replace
  std::u32string content;  // Replace
  char32_t strip_char = U' ';
  int strip_start = 0, strip_stop = 0;
  char32_t replacement = U'\u2581';  // Metaspace
  bool prepend_never = false;        // Metaspace

  bool Has(Kind k) const;

  void Apply(std::vector<std::string>* tokens) const;

  static absl::StatusOr<std::unique_ptr<HfDecoder>> Parse(const json& j, const std::string& path,
                                                          const std::string& source);
};

}  // namespace hap::text_internal
