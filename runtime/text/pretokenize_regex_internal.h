// The parsed form of a PretokenizeRegex, shared by its parser (pretokenize_regex_parse.cc) and
// its matcher (pretokenize_regex.cc). Internal to runtime/text.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/text/unicode.h"

namespace hap::regex_internal {

// A set of code points. Leaves are a range, a set of general categories or White_Space; inner
// sets are unions or intersections of their children; kFolded is the union of its children
// tested on SimpleFold(c) (case-insensitive literals and ranges). Any set may be negated.
struct CharSet {
  enum class Kind : uint8_t { kRange, kCategories, kWhitespace, kUnion, kIntersection, kFolded };

  Kind kind = Kind::kUnion;
  bool negated = false;
  char32_t lo = 0, hi = 0;  // kRange, inclusive
  uint32_t categories = 0;  // kCategories: bit i is unicode::Category(i)
  std::vector<CharSet> children;

  bool Contains(char32_t c) const {
    bool in = false;
    switch (kind) {
      case Kind::kRange:
        in = c >= lo && c <= hi;
        break;
      case Kind::kCategories:
        in = (categories >> static_cast<int>(unicode::GeneralCategory(c))) & 1;
        break;
      case Kind::kWhitespace:
        in = unicode::IsWhitespace(c);
        break;
      case Kind::kUnion:
        in = std::any_of(children.begin(), children.end(),
                         [c](const CharSet& s) { return s.Contains(c); });
        break;
      case Kind::kIntersection:
        in = std::all_of(children.begin(), children.end(),
                         [c](const CharSet& s) { return s.Contains(c); });
        break;
      case Kind::kFolded: {
        const char32_t folded = unicode::SimpleFold(c);
        in = std::any_of(children.begin(), children.end(),
                         [folded](const CharSet& s) { return s.Contains(folded); });
        break;
      }
    }
    return in != negated;
  }
};

enum class NodeKind : uint8_t {
  kEmpty,
  kChar,
  kSequence,
  kAlternation,
  kRepeat,
  kLookahead,
  kAnchor
};

// ^ and $ are line anchors (at "\n"), as in Oniguruma's Ruby and Oniguruma syntaxes.
enum class Anchor : uint8_t { kLineBegin, kLineEnd, kTextBegin, kTextEnd, kTextEndOrFinalNewline };

struct Node {
  NodeKind kind = NodeKind::kEmpty;
  // kChar: one code point from `chars`; `ascii` caches Contains for c < 128.
  CharSet chars;
  uint64_t ascii[2] = {0, 0};
  // kSequence, kAlternation: the parts in order; kRepeat, kLookahead: the one operand.
  std::vector<std::unique_ptr<Node>> children;
  int min = 0, max = -1;  // kRepeat; max -1 is unbounded
  bool greedy = true;     // kRepeat
  bool negated = false;   // kLookahead: (?!..)
  Anchor anchor = Anchor::kTextBegin;

  bool MatchesChar(char32_t c) const {
    if (c < 128) return (ascii[c >> 6] >> (c & 63)) & 1;
    return chars.Contains(c);
  }
};

// Parses a UTF-8 pattern (the header's subset, Oniguruma's reading) into a tree; InvalidArgument
// names an unsupported or malformed construct and its byte offset. Counts capture groups.
absl::StatusOr<std::unique_ptr<Node>> ParsePattern(std::string_view pattern, int* num_groups);

}  // namespace hap::regex_internal
