// Unicode character data for tokenizers: UTF-8 conversion, general categories, White_Space,
// simple case folding and NFC. The tables are generated from Python's unicodedata by
// tools/unicode/gen_unicode_tables.py into unicode_tables.inc (its header names the Unicode
// version).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hap::unicode {

// The Unicode version of the generated tables (unicodedata.unidata_version), e.g. "14.0.0".
std::string_view UnicodeVersion();

// The 30 general categories (Unicode's two-letter values).
// One line per major class.
// clang-format off
enum class Category : uint8_t {
  kLu, kLl, kLt, kLm, kLo,       // letters
  kMn, kMc, kMe,                 // marks
  kNd, kNl, kNo,                 // numbers
  kPc, kPd, kPs, kPe, kPi, kPf, kPo,  // punctuation
  kSm, kSc, kSk, kSo,            // symbols
  kZs, kZl, kZp,                 // separators
  kCc, kCf, kCs, kCo, kCn,       // other (kCn: unassigned, and anything above U+10FFFF)
};
// clang-format on

Category GeneralCategory(char32_t c);
// The category's major class as its letter: 'L', 'M', 'N', 'P', 'S', 'Z' or 'C'.
char MajorClass(Category category);

inline bool IsLetter(char32_t c) { return MajorClass(GeneralCategory(c)) == 'L'; }  // \p{L}
inline bool IsNumber(char32_t c) { return MajorClass(GeneralCategory(c)) == 'N'; }  // \p{N}
// The White_Space property (what \s matches in Oniguruma's Unicode mode and Rust's
// char::is_whitespace): U+0009..U+000D, U+0020, U+0085, U+00A0, U+1680, U+2000..U+200A,
// U+2028, U+2029, U+202F, U+205F, U+3000.
bool IsWhitespace(char32_t c);

// Simple case folding (CaseFolding.txt statuses C and S): the one code point `c` folds to, or
// `c` itself. Case-insensitive regex groups compare folded code points.
char32_t SimpleFold(char32_t c);

// Python's str.isspace() of one code point: White_Space plus U+001C..U+001F (what str.strip(),
// str.split() and Jinja's |trim treat as whitespace).
bool IsPythonSpace(char32_t c);

// Python's str methods on code points, with its full case mappings (SpecialCasing: "ß".upper()
// is "SS", "İ".lower() is "i̇"): upper(), lower() (with the final sigma rule: Σ ending a word
// lowers to ς), title() (a cased character after a cased one lowers, any other title-cases),
// capitalize() (the first character title-cased, the rest lowered).
std::u32string PyUpper(std::u32string_view text);
std::u32string PyLower(std::u32string_view text);
std::u32string PyTitle(std::u32string_view text);
std::u32string PyCapitalize(std::u32string_view text);

// Canonical composition (Normalization Form C) of `text`.
std::u32string Nfc(std::u32string_view text);

// UTF-8 → code points. Each maximal invalid subsequence (as Unicode §3.9 and Rust's
// String::from_utf8_lossy define it) becomes one U+FFFD.
std::u32string DecodeUtf8(std::string_view text);
// Code points → UTF-8; surrogates and values above U+10FFFF are written as U+FFFD.
void AppendUtf8(char32_t c, std::string* out);
std::string EncodeUtf8(std::u32string_view text);

// Whether `text` ends inside a UTF-8 sequence that more continuation bytes could still make
// valid (a streaming decoder holds such a tail back).
bool EndsInsideUtf8Sequence(std::string_view text);

}  // namespace hap::unicode
