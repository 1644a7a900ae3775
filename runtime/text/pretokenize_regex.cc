// A backtracking matcher for the pre-tokenizer patterns of tokenizer.json (see the header). The
// pattern is parsed into a tree (pretokenize_regex_parse.cc); matching walks it with explicit
// continuations, so an alternative or a quantifier can retry what follows it, as Oniguruma's
// backtracking does.
#include "runtime/text/pretokenize_regex.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "runtime/text/pretokenize_regex_internal.h"

namespace hap {
namespace {

using regex_internal::Anchor;
using regex_internal::Node;
using regex_internal::NodeKind;

// The matcher recurses once per node it enters (not per code point a one-code-point repetition
// covers), so only repetitions of groups grow the stack with the text. Past this much stack
// (measured, so sanitizer builds with larger frames stay safe too) Find gives up and reports no
// match rather than overflow.
constexpr uintptr_t kMaxMatchStackBytes = 1 << 20;

// What is left to match after the node being matched: the rest of a sequence, the next
// iteration of a repetition, or nothing (accept). Continuations live on the C++ stack of the
// calls that made them and link outward.
struct Cont {
  enum class Kind : uint8_t { kAccept, kLookaheadDone, kSequence, kRepeat };
  Kind kind;
  const Node* node = nullptr;
  size_t index = 0;  // kSequence: next child; kRepeat: iterations before this one
  size_t start = 0;  // kRepeat: where this iteration began
  const Cont* next = nullptr;
};

class Matcher {
 public:
  explicit Matcher(std::u32string_view text) : text_(text) {}

  bool MatchAt(const Node& root, size_t pos, size_t* end) {
    stack_base_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    const Cont accept{Cont::Kind::kAccept};
    if (!Match(root, pos, accept) || too_deep_) return false;
    *end = end_;
    return true;
  }

  // Whether a match attempt ran past kMaxMatchStackBytes (and so was abandoned).
  bool too_deep() const { return too_deep_; }

 private:
  bool Match(const Node& node, size_t pos, const Cont& k) {
    if (too_deep_) return false;
    const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    if ((here < stack_base_ ? stack_base_ - here : here - stack_base_) > kMaxMatchStackBytes) {
      too_deep_ = true;
      return false;
    }
    switch (node.kind) {
      case NodeKind::kEmpty:
        return Continue(k, pos);
      case NodeKind::kChar:
        return pos < text_.size() && node.MatchesChar(text_[pos]) && Continue(k, pos + 1);
      case NodeKind::kSequence: {
        const Cont rest{Cont::Kind::kSequence, &node, 1, 0, &k};
        return Match(*node.children[0], pos, rest);
      }
      case NodeKind::kAlternation:
        for (const auto& alternative : node.children) {
          if (Match(*alternative, pos, k)) return true;
        }
        return false;
      case NodeKind::kRepeat:
        if (node.children[0]->kind == NodeKind::kChar) return RepeatChar(node, pos, k);
        return RepeatFrom(node, 0, pos, k);
      case NodeKind::kLookahead: {
        // Atomic, as in Perl and Oniguruma: the first way the operand matches decides.
        const Cont done{Cont::Kind::kLookaheadDone};
        const bool matched = Match(*node.children[0], pos, done);
        return matched != node.negated && Continue(k, pos);
      }
      case NodeKind::kAnchor:
        return AnchorHolds(node.anchor, pos) && Continue(k, pos);
    }
    return false;
  }

  bool Continue(const Cont& k, size_t pos) {
    switch (k.kind) {
      case Cont::Kind::kAccept:
        end_ = pos;
        return true;
      case Cont::Kind::kLookaheadDone:
        return true;
      case Cont::Kind::kSequence: {
        const Node& seq = *k.node;
        if (k.index == seq.children.size()) return Continue(*k.next, pos);
        const Cont rest{Cont::Kind::kSequence, &seq, k.index + 1, 0, k.next};
        return Match(*seq.children[k.index], pos, rest);
      }
      case Cont::Kind::kRepeat: {
        const size_t count = k.index + 1;
        // An empty iteration past the minimum ends the loop (Oniguruma's empty check), or
        // "(?:)*" would spin.
        if (pos == k.start && count > static_cast<size_t>(k.node->min)) {
          return Continue(*k.next, pos);
        }
        return RepeatFrom(*k.node, count, pos, *k.next);
      }
    }
    return false;
  }

  // A repetition of a group: one more iteration of the body or the continuation, in the order
  // greediness asks for. Recursion depth grows with the iterations.
  bool RepeatFrom(const Node& repeat, size_t count, size_t pos, const Cont& k) {
    const Node& body = *repeat.children[0];
    const Cont again{Cont::Kind::kRepeat, &repeat, count, pos, &k};
    if (count < static_cast<size_t>(repeat.min)) return Match(body, pos, again);
    const bool can_repeat = repeat.max < 0 || count < static_cast<size_t>(repeat.max);
    if (repeat.greedy) return (can_repeat && Match(body, pos, again)) || Continue(k, pos);
    return Continue(k, pos) || (can_repeat && Match(body, pos, again));
  }

  // A repetition of one code point, without recursion: the run of matching code points is
  // counted, then the continuation tried from the longest run down (greedy) or the shortest up
  // (lazy).
  bool RepeatChar(const Node& repeat, size_t pos, const Cont& k) {
    const Node& atom = *repeat.children[0];
    const size_t min = repeat.min;
    size_t limit = text_.size() - pos;
    if (repeat.max >= 0) limit = std::min(limit, static_cast<size_t>(repeat.max));
    if (repeat.greedy) {
      size_t run = 0;
      while (run < limit && atom.MatchesChar(text_[pos + run])) ++run;
      if (run < min) return false;
      for (size_t n = run;; --n) {
        if (Continue(k, pos + n)) return true;
        if (n == min) return false;
      }
    }
    for (size_t n = 0;; ++n) {
      if (n >= min && Continue(k, pos + n)) return true;
      if (n >= limit || !atom.MatchesChar(text_[pos + n])) return false;
    }
  }

  bool AnchorHolds(Anchor anchor, size_t pos) const {
    const size_t size = text_.size();
    switch (anchor) {
      case Anchor::kTextBegin:
        return pos == 0;
      case Anchor::kTextEnd:
        return pos == size;
      case Anchor::kTextEndOrFinalNewline:
        return pos == size || (pos + 1 == size && text_[pos] == '\n');
      case Anchor::kLineBegin:  // not after a newline that ends the text (Oniguruma)
        return pos == 0 || (text_[pos - 1] == '\n' && pos < size);
      case Anchor::kLineEnd:
        return pos == size || text_[pos] == '\n';
    }
    return false;
  }

  std::u32string_view text_;
  size_t end_ = 0;
  uintptr_t stack_base_ = 0;  // frame address of MatchAt
  bool too_deep_ = false;
};

}  // namespace

absl::StatusOr<PretokenizeRegex> PretokenizeRegex::Compile(std::string_view pattern) {
  PretokenizeRegex regex;
  regex.pattern_ = std::string(pattern);
  auto root = regex_internal::ParsePattern(regex.pattern_, &regex.num_groups_);
  if (!root.ok()) return root.status();
  regex.root_ = *std::move(root);
  return regex;
}

PretokenizeRegex::PretokenizeRegex(PretokenizeRegex&&) noexcept = default;
PretokenizeRegex& PretokenizeRegex::operator=(PretokenizeRegex&&) noexcept = default;
PretokenizeRegex::~PretokenizeRegex() = default;

bool PretokenizeRegex::Find(std::u32string_view text, size_t from, size_t* begin,
                            size_t* end) const {
  Matcher matcher(text);
  for (size_t start = from; start <= text.size(); ++start) {
    if (matcher.MatchAt(*root_, start, end)) {
      *begin = start;
      return true;
    }
    // Later starts would most likely run as deep again; stop here, bounded.
    if (matcher.too_deep()) return false;
  }
  return false;
}

}  // namespace hap
