// The regular expressions of Hugging Face tokenizer.json pre-tokenizers (Split's Regex pattern,
// ByteLevel's GPT-2 pattern), matched over code points with the semantics of Oniguruma, the
// engine the tokenizers library compiles them with: a backtracking matcher, alternatives tried
// in order, greedy or lazy quantifiers, leftmost match.
//
// Supported: literals and escapes (\t \n \r \f \v \e \0 \xHH \x{H..} \uHHHH and escaped
// punctuation), ., \s \S \d \D \w \W \h \H, \p{..} / \P{..} / \p{^..} with a general category
// or major class (L, Lu, N, Nd, P, ...) and \p{Any}, bracket classes with ranges, negation and
// nested escapes, groups (..) (?:..), inline case-insensitivity (?i:..) and (?i), lookahead
// (?=..) (?!..), alternation, quantifiers ? * + {n} {n,} {n,m} and their lazy forms, the
// anchors ^ $ \A \z \Z. Anything else (backreferences, lookbehind, possessive or atomic forms,
// POSIX brackets) is refused by Compile with the construct and its position named.
//
// Case-insensitive parts compare simple case folds: a literal matches c when SimpleFold(c) is
// its fold, a class when c is in it or SimpleFold(c) is the fold of one of its literals or range
// members (so (?i:'s) matches "'S" and "'\u017F"); \p and the class escapes are not folded, and
// multi-code-point folds (German sharp s to "ss") are not applied. A repetition of one code
// point (\s+, [^\s\p{L}]*, \p{N}{1,3}) runs iteratively on texts of any length; a repetition of
// a group recurses per iteration, and a match needing more than 1 MiB of stack for that
// (about two thousand iterations of a short group) is abandoned: Find then returns false rather
// than overflow the stack.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace hap {

namespace regex_internal {
struct Node;
}  // namespace regex_internal

class PretokenizeRegex {
 public:
  // `pattern` is UTF-8. InvalidArgument names the unsupported or malformed construct and its
  // byte offset in the pattern.
  static absl::StatusOr<PretokenizeRegex> Compile(std::string_view pattern);

  PretokenizeRegex(PretokenizeRegex&&) noexcept;
  PretokenizeRegex& operator=(PretokenizeRegex&&) noexcept;
  ~PretokenizeRegex();

  // The leftmost match starting at or after `from` (code point offsets into `text`); false when
  // there is none. A match may be empty.
  bool Find(std::u32string_view text, size_t from, size_t* begin, size_t* end) const;

  const std::string& pattern() const { return pattern_; }

 private:
  PretokenizeRegex() = default;

  std::string pattern_;
  std::unique_ptr<regex_internal::Node> root_;
  int num_groups_ = 0;
};

}  // namespace hap
