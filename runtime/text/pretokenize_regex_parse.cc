// Parses pre-tokenizer patterns (the subset pretokenize_regex.h lists) with Oniguruma's readings
// of the corner cases, into the tree the matcher walks.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "runtime/text/pretokenize_regex_internal.h"
#include "runtime/text/unicode.h"

namespace hap::regex_internal {
namespace {

// Oniguruma's ONIG_MAX_REPEAT_NUM, and a nesting bound that keeps the recursive parser (and
// matcher) well inside the stack.
constexpr int kMaxRepeat = 100000;
constexpr int kMaxNesting = 200;

CharSet Range(char32_t lo, char32_t hi) {
  CharSet s;
  s.kind = CharSet::Kind::kRange;
  s.lo = lo;
  s.hi = hi;
  return s;
}

CharSet Categories(uint32_t mask, bool negated = false) {
  CharSet s;
  s.kind = CharSet::Kind::kCategories;
  s.categories = mask;
  s.negated = negated;
  return s;
}

uint32_t Bit(unicode::Category c) { return 1u << static_cast<int>(c); }

// Masks of unicode::Category bits, in enum order (Lu Ll Lt Lm Lo | Mn Mc Me | Nd Nl No | Pc..Po |
// Sm..So | Zs Zl Zp | Cc..Cn).
constexpr uint32_t kLetterMask = 0x1Fu;
constexpr uint32_t kMarkMask = 0x7u << 5;
constexpr uint32_t kNumberMask = 0x7u << 8;
constexpr uint32_t kPunctuationMask = 0x7Fu << 11;
constexpr uint32_t kSymbolMask = 0xFu << 18;
constexpr uint32_t kSeparatorMask = 0x7u << 22;
constexpr uint32_t kOtherMask = 0x1Fu << 25;
constexpr uint32_t kAllMask = (1u << 30) - 1;

// \p{..} names: Oniguruma compares them ignoring case, spaces, '_' and '-'.
uint32_t PropertyMask(std::string_view name) {
  using unicode::Category;
  struct Entry {
    std::string_view name;
    uint32_t mask;
  };
  static const Entry kEntries[] = {
      {"any", kAllMask},
      {"l", kLetterMask},
      {"letter", kLetterMask},
      {"lc", Bit(Category::kLu) | Bit(Category::kLl) | Bit(Category::kLt)},
      {"l&", Bit(Category::kLu) | Bit(Category::kLl) | Bit(Category::kLt)},
      {"casedletter", Bit(Category::kLu) | Bit(Category::kLl) | Bit(Category::kLt)},
      {"lu", Bit(Category::kLu)},
      {"uppercaseletter", Bit(Category::kLu)},
      {"ll", Bit(Category::kLl)},
      {"lowercaseletter", Bit(Category::kLl)},
      {"lt", Bit(Category::kLt)},
      {"titlecaseletter", Bit(Category::kLt)},
      {"lm", Bit(Category::kLm)},
      {"modifierletter", Bit(Category::kLm)},
      {"lo", Bit(Category::kLo)},
      {"otherletter", Bit(Category::kLo)},
      {"m", kMarkMask},
      {"mark", kMarkMask},
      {"combiningmark", kMarkMask},
      {"mn", Bit(Category::kMn)},
      {"nonspacingmark", Bit(Category::kMn)},
      {"mc", Bit(Category::kMc)},
      {"spacingmark", Bit(Category::kMc)},
      {"me", Bit(Category::kMe)},
      {"enclosingmark", Bit(Category::kMe)},
      {"n", kNumberMask},
      {"number", kNumberMask},
      {"nd", Bit(Category::kNd)},
      {"decimalnumber", Bit(Category::kNd)},
      {"nl", Bit(Category::kNl)},
      {"letternumber", Bit(Category::kNl)},
      {"no", Bit(Category::kNo)},
      {"othernumber", Bit(Category::kNo)},
      {"p", kPunctuationMask},
      {"punctuation", kPunctuationMask},
      {"pc", Bit(Category::kPc)},
      {"connectorpunctuation", Bit(Category::kPc)},
      {"pd", Bit(Category::kPd)},
      {"dashpunctuation", Bit(Category::kPd)},
      {"ps", Bit(Category::kPs)},
      {"openpunctuation", Bit(Category::kPs)},
      {"pe", Bit(Category::kPe)},
      {"closepunctuation", Bit(Category::kPe)},
      {"pi", Bit(Category::kPi)},
      {"initialpunctuation", Bit(Category::kPi)},
      {"pf", Bit(Category::kPf)},
      {"finalpunctuation", Bit(Category::kPf)},
      {"po", Bit(Category::kPo)},
      {"otherpunctuation", Bit(Category::kPo)},
      {"s", kSymbolMask},
      {"symbol", kSymbolMask},
      {"sm", Bit(Category::kSm)},
      {"mathsymbol", Bit(Category::kSm)},
      {"sc", Bit(Category::kSc)},
      {"currencysymbol", Bit(Category::kSc)},
      {"sk", Bit(Category::kSk)},
      {"modifiersymbol", Bit(Category::kSk)},
      {"so", Bit(Category::kSo)},
      {"othersymbol", Bit(Category::kSo)},
      {"z", kSeparatorMask},
      {"separator", kSeparatorMask},
      {"zs", Bit(Category::kZs)},
      {"spaceseparator", Bit(Category::kZs)},
      {"zl", Bit(Category::kZl)},
      {"lineseparator", Bit(Category::kZl)},
      {"zp", Bit(Category::kZp)},
      {"paragraphseparator", Bit(Category::kZp)},
      {"c", kOtherMask},
      {"other", kOtherMask},
      {"cc", Bit(Category::kCc)},
      {"control", Bit(Category::kCc)},
      {"cf", Bit(Category::kCf)},
      {"format", Bit(Category::kCf)},
      {"cs", Bit(Category::kCs)},
      {"surrogate", Bit(Category::kCs)},
      {"co", Bit(Category::kCo)},
      {"privateuse", Bit(Category::kCo)},
      {"cn", Bit(Category::kCn)},
      {"unassigned", Bit(Category::kCn)},
  };
  std::string key;
  for (char c : name) {
    if (c == ' ' || c == '_' || c == '-') continue;
    key.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
  }
  for (const Entry& e : kEntries) {
    if (e.name == key) return e.mask;
  }
  return 0;
}

bool IsDigit(char32_t c) { return c >= '0' && c <= '9'; }
bool IsOctal(char32_t c) { return c >= '0' && c <= '7'; }
int HexValue(char32_t c) {
  if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return static_cast<int>(c - 'A' + 10);
  return -1;
}

// {fold(x) : x in the ranges}, as sorted disjoint ranges: the kFolded half of a case-insensitive
// class, so that [A-Z] matches 'a' (fold('a') == fold('A')) as well as [a-z] matches 'A'.
CharSet FoldedRanges(const std::vector<std::pair<char32_t, char32_t>>& ranges) {
  std::vector<char32_t> folded;
  for (const auto& [lo, hi] : ranges) {
    for (char32_t c = lo;; ++c) {
      folded.push_back(unicode::SimpleFold(c));
      if (c == hi) break;
    }
  }
  std::sort(folded.begin(), folded.end());
  folded.erase(std::unique(folded.begin(), folded.end()), folded.end());
  CharSet set;
  set.kind = CharSet::Kind::kFolded;
  for (size_t i = 0; i < folded.size();) {
    size_t j = i;
    while (j + 1 < folded.size() && folded[j + 1] == folded[j] + 1) ++j;
    set.children.push_back(Range(folded[i], folded[j]));
    i = j + 1;
  }
  return set;
}

std::unique_ptr<Node> MakeNode(NodeKind kind) {
  auto node = std::make_unique<Node>();
  node->kind = kind;
  return node;
}

std::unique_ptr<Node> CharNode(CharSet chars) {
  auto node = MakeNode(NodeKind::kChar);
  node->chars = std::move(chars);
  for (char32_t c = 0; c < 128; ++c) {
    if (node->chars.Contains(c)) node->ascii[c >> 6] |= uint64_t{1} << (c & 63);
  }
  return node;
}

// The result of an escape: one code point (which a class may use as a range end), a set, or an
// anchor.
struct Escape {
  enum class Kind { kCodePoint, kSet, kAnchor } kind = Kind::kCodePoint;
  char32_t code_point = 0;
  CharSet set;
  Anchor anchor = Anchor::kTextBegin;
};

class Parser {
 public:
  explicit Parser(std::string_view pattern) : pattern_(pattern) {}

  absl::StatusOr<std::unique_ptr<Node>> Parse(int* num_groups) {
    absl::Status decoded = Decode();
    if (!decoded.ok()) return decoded;
    auto root = ParseAlternation(/*fold=*/false, /*depth=*/0);
    if (!root.ok()) return root.status();
    if (pos_ < cps_.size()) return Malformed("unmatched ')'", pos_);
    *num_groups = num_groups_;
    return root;
  }

 private:
  // Strict UTF-8 (Oniguruma refuses an invalid pattern too), keeping each code point's byte
  // offset for error messages.
  absl::Status Decode() {
    size_t i = 0;
    while (i < pattern_.size()) {
      const auto b = static_cast<unsigned char>(pattern_[i]);
      int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
      char32_t c = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
      bool ok = len > 0 && i + len <= pattern_.size();
      for (int k = 1; ok && k < len; ++k) {
        const auto cont = static_cast<unsigned char>(pattern_[i + k]);
        ok = (cont & 0xC0) == 0x80;
        c = (c << 6) | (cont & 0x3F);
      }
      static constexpr char32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
      if (!ok || c < kMinForLength[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("pretokenize regex: invalid UTF-8 at byte %d of the pattern", i));
      }
      cps_.push_back(c);
      offsets_.push_back(i);
      i += len;
    }
    offsets_.push_back(pattern_.size());
    return absl::OkStatus();
  }

  absl::Status Unsupported(std::string_view what, size_t at) const {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pretokenize regex: unsupported %s at byte %d of the pattern", what, offsets_[at]));
  }
  absl::Status Malformed(std::string_view what, size_t at) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("pretokenize regex: malformed pattern, %s at byte %d", what, offsets_[at]));
  }

  bool AtEnd() const { return pos_ >= cps_.size(); }
  char32_t Peek(size_t ahead = 0) const {
    return pos_ + ahead < cps_.size() ? cps_[pos_ + ahead] : 0;
  }

  // alternation := sequence ('|' sequence)*, up to an unconsumed ')' or the end.
  absl::StatusOr<std::unique_ptr<Node>> ParseAlternation(bool fold, int depth) {
    if (depth > kMaxNesting) return Unsupported("nesting of groups deeper than 200", pos_);
    std::vector<std::unique_ptr<Node>> alternatives;
    while (true) {
      auto sequence = ParseSequence(fold, depth);
      if (!sequence.ok()) return sequence.status();
      alternatives.push_back(*std::move(sequence));
      if (AtEnd() || Peek() != '|') break;
      ++pos_;
    }
    if (alternatives.size() == 1) return std::move(alternatives[0]);
    // Alternatives of one code point each match the union of their sets, whatever the order;
    // one set lets a repetition of them run iteratively.
    if (std::all_of(alternatives.begin(), alternatives.end(),
                    [](const auto& n) { return n->kind == NodeKind::kChar; })) {
      CharSet set;
      for (auto& n : alternatives) set.children.push_back(std::move(n->chars));
      return CharNode(std::move(set));
    }
    auto node = MakeNode(NodeKind::kAlternation);
    node->children = std::move(alternatives);
    return node;
  }

  absl::StatusOr<std::unique_ptr<Node>> ParseSequence(bool fold, int depth) {
    std::vector<std::unique_ptr<Node>> items;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      std::unique_ptr<Node> atom;
      bool quantifiable = true;
      const char32_t c = Peek();
      if (c == '(') {
        bool isolated_option = false;
        auto group = ParseGroup(fold, depth, &isolated_option, &quantifiable);
        if (!group.ok()) return group.status();
        atom = *std::move(group);
        if (isolated_option) {
          // (?i) applies to the rest of the enclosing group, alternatives included
          // (Oniguruma: "ab(?i)c|def" == "ab(?i:c|def)"); ParseGroup parsed that rest.
          items.push_back(std::move(atom));
          break;
        }
      } else if (c == '[') {
        auto set = ParseClass(fold);
        if (!set.ok()) return set.status();
        atom = CharNode(*std::move(set));
      } else if (c == '.') {
        ++pos_;
        CharSet not_newline = Range('\n', '\n');
        not_newline.negated = true;
        atom = CharNode(std::move(not_newline));
      } else if (c == '^' || c == '$') {
        ++pos_;
        atom = MakeNode(NodeKind::kAnchor);
        atom->anchor = c == '^' ? Anchor::kLineBegin : Anchor::kLineEnd;
        quantifiable = false;
      } else if (c == '\\') {
        auto escape = ParseEscape(/*in_class=*/false);
        if (!escape.ok()) return escape.status();
        if (escape->kind == Escape::Kind::kAnchor) {
          atom = MakeNode(NodeKind::kAnchor);
          atom->anchor = escape->anchor;
          quantifiable = false;
        } else if (escape->kind == Escape::Kind::kSet) {
          atom = CharNode(std::move(escape->set));
        } else {
          atom = CharNode(Literal(escape->code_point, fold));
        }
      } else if (c == '*' || c == '+' || c == '?' || (c == '{' && IntervalAt(pos_, nullptr))) {
        return Malformed("quantifier without a target", pos_);
      } else {
        ++pos_;
        atom = CharNode(Literal(c, fold));
      }
      auto quantified = ParseQuantifiers(std::move(atom), quantifiable);
      if (!quantified.ok()) return quantified.status();
      items.push_back(*std::move(quantified));
    }
    if (items.empty()) return MakeNode(NodeKind::kEmpty);
    if (items.size() == 1) return std::move(items[0]);
    auto node = MakeNode(NodeKind::kSequence);
    node->children = std::move(items);
    return node;
  }

  static CharSet Literal(char32_t c, bool fold) {
    if (!fold) return Range(c, c);
    CharSet set;
    set.kind = CharSet::Kind::kFolded;
    const char32_t folded = unicode::SimpleFold(c);
    set.children.push_back(Range(folded, folded));
    return set;
  }

  // Whether an interval quantifier {n}, {n,}, {,m} or {n,m} starts at `at`; Oniguruma reads
  // anything else starting with '{' as a literal '{'.
  bool IntervalAt(size_t at, size_t* end, int* min = nullptr, int* max = nullptr,
                  bool* overflow = nullptr) const {
    if (at >= cps_.size() || cps_[at] != '{') return false;
    size_t i = at + 1;
    auto number = [&](int64_t* value) {
      size_t digits = 0;
      *value = 0;
      while (i < cps_.size() && IsDigit(cps_[i])) {
        *value = std::min<int64_t>(*value * 10 + (cps_[i] - '0'), int64_t{1} << 40);
        ++i;
        ++digits;
      }
      return digits > 0;
    };
    int64_t lo = 0, hi = -1;
    const bool has_lo = number(&lo);
    bool has_comma = false, has_hi = false;
    if (i < cps_.size() && cps_[i] == ',') {
      has_comma = true;
      ++i;
      has_hi = number(&hi);
    }
    if (i >= cps_.size() || cps_[i] != '}') return false;
    if (!has_lo && !has_hi) return false;  // "{}", "{,}"
    if (!has_comma) hi = lo;
    if (end != nullptr) *end = i + 1;
    if (overflow != nullptr) *overflow = lo > kMaxRepeat || hi > kMaxRepeat;
    if (min != nullptr) *min = static_cast<int>(std::min<int64_t>(lo, kMaxRepeat));
    if (max != nullptr)
      *max = has_comma && !has_hi ? -1 : static_cast<int>(std::min<int64_t>(hi, kMaxRepeat));
    return true;
  }

  // Applies the quantifiers that follow an atom. Oniguruma's readings: x*? x+? x?? x{n,m}? are
  // lazy; x*+ x++ x?+ are possessive (refused); x{n}? is (?:x{n})? and x{n,m}+ is (?:x{n,m})+,
  // since its syntax keeps fixed intervals greedy and has no possessive interval; further
  // quantifiers nest.
  absl::StatusOr<std::unique_ptr<Node>> ParseQuantifiers(std::unique_ptr<Node> atom,
                                                         bool quantifiable) {
    while (!AtEnd()) {
      const size_t at = pos_;
      int min = 0, max = -1;
      bool interval = false, fixed = false;
      const char32_t c = Peek();
      size_t end = 0;
      bool overflow = false;
      if (c == '*') {
        min = 0, max = -1;
      } else if (c == '+') {
        min = 1, max = -1;
      } else if (c == '?') {
        min = 0, max = 1;
      } else if (IntervalAt(pos_, &end, &min, &max, &overflow)) {
        if (overflow) return Unsupported("repeat count above 100000", at);
        if (max >= 0 && min > max) return Malformed("repeat range with min > max", at);
        interval = true;
        fixed = min == max;
      } else {
        break;
      }
      if (!quantifiable) return Unsupported("quantifier on an anchor or lookahead", at);
      pos_ = interval ? end : pos_ + 1;
      bool greedy = true;
      if (!AtEnd() && Peek() == '?' && !fixed) {
        greedy = false;
        ++pos_;
      } else if (!AtEnd() && Peek() == '+' && !interval) {
        return Unsupported("possessive quantifier", pos_ - 1);
      }
      auto repeat = MakeNode(NodeKind::kRepeat);
      repeat->min = min;
      repeat->max = max;
      repeat->greedy = greedy;
      repeat->children.push_back(std::move(atom));
      atom = std::move(repeat);
    }
    return atom;
  }

  // At '(': a group, a lookahead, or an option setting. Sets *isolated_option for "(?i)" and
  // "(?-i)", whose node is the rest of the enclosing group.
  absl::StatusOr<std::unique_ptr<Node>> ParseGroup(bool fold, int depth, bool* isolated_option,
                                                   bool* quantifiable) {
    const size_t open = pos_;
    ++pos_;
    bool inner_fold = fold;
    std::unique_ptr<Node> lookahead;
    if (Peek() == '?') {
      const char32_t kind = Peek(1);
      if (kind == ':') {
        pos_ += 2;
      } else if (kind == '=' || kind == '!') {
        pos_ += 2;
        lookahead = MakeNode(NodeKind::kLookahead);
        lookahead->negated = kind == '!';
        *quantifiable = false;
      } else if (kind == '<' && (Peek(2) == '=' || Peek(2) == '!')) {
        return Unsupported("lookbehind (?<= or (?<!", open);
      } else if (kind == '<' || kind == '\'' || kind == 'P') {
        return Unsupported("named group", open);
      } else if (kind == '>') {
        return Unsupported("atomic group (?>", open);
      } else if (kind == '#') {
        return Unsupported("comment group (?#", open);
      } else if (kind == '~') {
        return Unsupported("absent operator (?~", open);
      } else if (kind == '(') {
        return Unsupported("conditional group (?(", open);
      } else if (kind == 'i' || kind == '-' || (kind >= 'a' && kind <= 'z') ||
                 (kind >= 'A' && kind <= 'Z')) {
        pos_ += 1;
        bool negative = false;
        while (!AtEnd() && Peek() != ':' && Peek() != ')') {
          const char32_t option = Peek();
          if (option == '-' && !negative) {
            negative = true;
          } else if (option == 'i') {
            inner_fold = !negative;
          } else if ((option >= 'a' && option <= 'z') || (option >= 'A' && option <= 'Z')) {
            return Unsupported(
                absl::StrFormat("group option '%c' (only i is)", static_cast<char>(option)), pos_);
          } else {
            return Malformed("bad group option", pos_);
          }
          ++pos_;
        }
        if (AtEnd()) return Malformed("missing ')'", open);
        if (Peek() == ')') {
          ++pos_;
          *isolated_option = true;
          *quantifiable = false;
          return ParseAlternation(inner_fold, depth + 1);
        }
        ++pos_;  // ':'
      } else {
        return Malformed("unknown group kind after '(?'", open);
      }
    } else {
      ++num_groups_;
    }
    auto inner = ParseAlternation(inner_fold, depth + 1);
    if (!inner.ok()) return inner.status();
    if (AtEnd() || Peek() != ')') return Malformed("missing ')'", open);
    ++pos_;
    if (lookahead != nullptr) {
      lookahead->children.push_back(*std::move(inner));
      return lookahead;
    }
    return inner;
  }

  // At '\\'.
  absl::StatusOr<Escape> ParseEscape(bool in_class) {
    const size_t at = pos_;
    ++pos_;
    if (AtEnd()) return Malformed("pattern ends with '\\'", at);
    const char32_t c = Peek();
    ++pos_;
    Escape e;
    auto code_point = [&e](char32_t cp) {
      e.kind = Escape::Kind::kCodePoint;
      e.code_point = cp;
      return e;
    };
    auto set = [&e](CharSet s) {
      e.kind = Escape::Kind::kSet;
      e.set = std::move(s);
      return e;
    };
    auto anchor = [&](Anchor a) -> absl::StatusOr<Escape> {
      if (in_class) return Unsupported("anchor escape inside a class", at);
      e.kind = Escape::Kind::kAnchor;
      e.anchor = a;
      return e;
    };
    using unicode::Category;
    switch (c) {
      case 't':
        return code_point('\t');
      case 'n':
        return code_point('\n');
      case 'r':
        return code_point('\r');
      case 'f':
        return code_point('\f');
      case 'v':
        return code_point('\v');
      case 'a':
        return code_point('\a');
      case 'e':
        return code_point(0x1B);
      case '0': {
        char32_t value = 0;
        for (int i = 0; i < 2 && !AtEnd() && IsOctal(Peek()); ++i)
          value = value * 8 + (cps_[pos_++] - '0');
        return code_point(value);
      }
      case 'x': {
        char32_t value = 0;
        if (Peek() == '{') {
          ++pos_;
          int digits = 0;
          while (!AtEnd() && HexValue(Peek()) >= 0 && digits < 8) {
            value = value * 16 + HexValue(cps_[pos_++]);
            ++digits;
          }
          if (digits == 0 || AtEnd() || Peek() != '}') return Malformed("bad \\x{..}", at);
          ++pos_;
          if (value > 0x10FFFF) return Malformed("code point above U+10FFFF", at);
          return code_point(value);
        }
        int digits = 0;
        while (digits < 2 && !AtEnd() && HexValue(Peek()) >= 0) {
          value = value * 16 + HexValue(cps_[pos_++]);
          ++digits;
        }
        if (digits == 0) return Malformed("\\x without hex digits", at);
        return code_point(value);
      }
      case 'u': {
        char32_t value = 0;
        for (int i = 0; i < 4; ++i) {
          if (AtEnd() || HexValue(Peek()) < 0) return Malformed("\\u needs 4 hex digits", at);
          value = value * 16 + HexValue(cps_[pos_++]);
        }
        return code_point(value);
      }
      case 's':
      case 'S': {
        CharSet space;
        space.kind = CharSet::Kind::kWhitespace;
        space.negated = c == 'S';
        return set(std::move(space));
      }
      case 'd':
        return set(Categories(Bit(Category::kNd)));
      case 'D':
        return set(Categories(Bit(Category::kNd), /*negated=*/true));
      // Oniguruma's Unicode \w: letters, marks, decimal digits, connector punctuation.
      case 'w':
        return set(Categories(kLetterMask | kMarkMask | Bit(Category::kNd) | Bit(Category::kPc)));
      case 'W':
        return set(Categories(kLetterMask | kMarkMask | Bit(Category::kNd) | Bit(Category::kPc),
                              /*negated=*/true));
      // In Oniguruma's syntaxes \h is a hex digit (not Perl's horizontal space).
      case 'h':
      case 'H': {
        CharSet hex;
        hex.children = {Range('0', '9'), Range('a', 'f'), Range('A', 'F')};
        hex.negated = c == 'H';
        return set(std::move(hex));
      }
      case 'p':
      case 'P': {
        if (Peek() != '{') return Unsupported("\\p without braces", at);
        ++pos_;
        bool negated = c == 'P';
        if (Peek() == '^') {
          negated = !negated;
          ++pos_;
        }
        std::string name;
        while (!AtEnd() && Peek() != '}') {
          if (Peek() >= 0x80) return Unsupported("property name", at);
          name.push_back(static_cast<char>(cps_[pos_++]));
        }
        if (AtEnd()) return Malformed("missing '}' of \\p{", at);
        ++pos_;
        const uint32_t mask = PropertyMask(name);
        if (mask == 0) return Unsupported(absl::StrFormat("property \\p{%s}", name), at);
        return set(Categories(mask, negated));
      }
      case 'A':
        return anchor(Anchor::kTextBegin);
      case 'z':
        return anchor(Anchor::kTextEnd);
      case 'Z':
        return anchor(Anchor::kTextEndOrFinalNewline);
      case 'b':
        if (in_class) return code_point('\b');
        return Unsupported("word boundary \\b", at);
      case 'B':
        return Unsupported("word boundary \\B", at);
      case 'k':
        return Unsupported("named backreference \\k", at);
      case 'g':
        return Unsupported("subexpression call \\g", at);
      case 'K':
        return Unsupported("keep \\K", at);
      case 'G':
        return Unsupported("search-start anchor \\G", at);
      case 'R':
        return Unsupported("general newline \\R", at);
      case 'X':
        return Unsupported("grapheme cluster \\X", at);
      case 'N':
      case 'O':
        return Unsupported(absl::StrFormat("escape \\%c", static_cast<char>(c)), at);
      case 'c':
      case 'C':
      case 'M':
        return Unsupported("control/meta escape", at);
      case 'o':
        return Unsupported("octal escape \\o{", at);
      default:
        break;
    }
    if (c >= '1' && c <= '9') return Unsupported("backreference", at);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      return Unsupported(absl::StrFormat("escape \\%c", static_cast<char>(c)), at);
    }
    return code_point(c);  // escaped punctuation, space or non-ASCII stands for itself
  }

  // At '[': a bracket class. Items are unioned; "&&" intersects the unions on either side.
  absl::StatusOr<CharSet> ParseClass(bool fold, int depth = 0) {
    const size_t open = pos_;
    if (depth > kMaxNesting) return Unsupported("nesting of classes deeper than 200", open);
    ++pos_;
    CharSet result;
    if (Peek() == '^') {
      result.negated = true;
      ++pos_;
    }
    std::vector<CharSet> operands;                      // of "&&"
    CharSet current;                                    // the union being read
    std::vector<std::pair<char32_t, char32_t>> ranges;  // literal ranges of `current`
    auto close_operand = [&]() {
      if (fold && !ranges.empty()) current.children.push_back(FoldedRanges(ranges));
      ranges.clear();
      if (!current.children.empty()) operands.push_back(std::move(current));
      current = CharSet();
    };
    bool first = true;
    while (true) {
      if (AtEnd()) return Malformed("missing ']'", open);
      const size_t item_start = pos_;
      char32_t c = Peek();
      if (c == ']' && !first) {
        ++pos_;
        break;
      }
      // Oniguruma reads a ']' right after '[' or '[^' as a literal when another ']' follows.
      if (c == ']' && first &&
          std::u32string_view(cps_).substr(pos_ + 1).find(']') == std::u32string_view::npos) {
        return Malformed("empty class", open);
      }
      first = false;
      if (c == '[' && Peek(1) == ':') {
        size_t i = pos_ + 2;
        if (i < cps_.size() && cps_[i] == '^') ++i;
        while (i < cps_.size() &&
               ((cps_[i] >= 'a' && cps_[i] <= 'z') || (cps_[i] >= 'A' && cps_[i] <= 'Z')))
          ++i;
        if (i + 1 < cps_.size() && cps_[i] == ':' && cps_[i + 1] == ']') {
          return Unsupported("POSIX bracket [:name:]", item_start);
        }
      }
      if (c == '[') {
        auto nested = ParseClass(fold, depth + 1);
        if (!nested.ok()) return nested.status();
        current.children.push_back(*std::move(nested));
        continue;
      }
      if (c == '&' && Peek(1) == '&') {
        pos_ += 2;
        close_operand();
        continue;
      }
      // One item: a code point (possibly a range start) or a set.
      char32_t lo = c;
      if (c == '\\') {
        auto escape = ParseEscape(/*in_class=*/true);
        if (!escape.ok()) return escape.status();
        if (escape->kind == Escape::Kind::kSet) {
          if (Peek() == '-' && Peek(1) != ']') {
            return Unsupported("range from a class escape", pos_);
          }
          current.children.push_back(std::move(escape->set));
          continue;
        }
        lo = escape->code_point;
      } else {
        ++pos_;
      }
      char32_t hi = lo;
      if (Peek() == '-' && pos_ + 1 < cps_.size() && Peek(1) != ']') {
        const size_t dash = pos_;
        ++pos_;
        if (Peek() == '[') return Unsupported("range to a nested class", dash);
        if (Peek() == '\\') {
          auto escape = ParseEscape(/*in_class=*/true);
          if (!escape.ok()) return escape.status();
          if (escape->kind != Escape::Kind::kCodePoint) {
            return Unsupported("range to a class escape", dash);
          }
          hi = escape->code_point;
        } else {
          hi = cps_[pos_++];
        }
        if (hi < lo) return Malformed("empty range in class", item_start);
      }
      current.children.push_back(Range(lo, hi));
      ranges.emplace_back(lo, hi);
    }
    close_operand();
    if (operands.size() == 1) {
      result.kind = CharSet::Kind::kUnion;
      result.children = std::move(operands[0].children);
    } else if (operands.empty()) {
      result.kind = CharSet::Kind::kUnion;  // "[&&]": nothing
    } else {
      result.kind = CharSet::Kind::kIntersection;
      result.children = std::move(operands);
    }
    return result;
  }

  std::string_view pattern_;
  std::u32string cps_;
  std::vector<size_t> offsets_;  // byte offset of each code point, then the pattern's size
  size_t pos_ = 0;
  int num_groups_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Node>> ParsePattern(std::string_view pattern, int* num_groups) {
  Parser parser(pattern);
  return parser.Parse(num_groups);
}

}  // namespace hap::regex_internal
