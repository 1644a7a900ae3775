// The chat-template lexer: splits a template into text and tags the way Jinja's lexer does with
// trim_blocks and lstrip_blocks, and tokenizes the expressions inside tags.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/text/chat_template_internal.h"
#include "runtime/text/unicode.h"

namespace hap {
namespace chat_template_internal {
namespace {

class Lexer {
 public:
  Lexer(const std::string& src, const std::string& origin) : src_(src), origin_(origin) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    const size_t n = src_.size();
    size_t pos = 0;
    bool line_starting = true;  // the previous tag's end consumed a newline
    while (pos < n) {
      size_t start = pos;
      while (start + 1 < n &&
             !(src_[start] == '{' &&
               (src_[start + 1] == '{' || src_[start + 1] == '%' || src_[start + 1] == '#'))) {
        ++start;
      }
      if (start + 1 >= n) {
        Emit(Tok::kText, pos, src_.substr(pos));
        break;
      }
      std::string_view text(src_.data() + pos, start - pos);
      const char type = src_[start + 1];
      size_t p = start + 2;
      const char sign = (p < n && (src_[p] == '-' || src_[p] == '+')) ? src_[p++] : 0;
      if (sign == '-') {
        while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
      } else if (sign != '+' && type != '{') {  // lstrip_blocks: indentation before a block tag
        const size_t nl = text.rfind('\n');
        const size_t l = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l > 0 || line_starting) &&
            text.find_first_not_of(" \t", l) == std::string_view::npos) {
          text = text.substr(0, l);
        }
      }
      if (!text.empty()) Emit(Tok::kText, pos, std::string(text));
      if (type == '#') {
        const size_t end = src_.find("#}", p);
        if (end == std::string::npos) return Error(start, "unterminated comment: expected '#}'");
        pos = end + 2;
        if (end > p && src_[end - 1] == '-') {
          pos = SkipSpace(pos);
        } else if (!(end > p && src_[end - 1] == '+') && pos < n && src_[pos] == '\n') {
          ++pos;  // trim_blocks
        }
      } else {
        HAP_ASSIGN_OR_RETURN(pos, LexTag(start, p, type == '%'));
      }
      line_starting = src_[pos - 1] == '\n';
    }
    Emit(Tok::kEnd, n);
    return std::move(out_);
  }

 private:
  void Emit(Tok kind, size_t offset, std::string text = "", Json number = nullptr) {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
    out_.push_back(Token{kind, std::move(text), std::move(number),
                         static_cast<int>(it - line_starts_.begin()) + 1,
                         static_cast<int>(offset - *it) + 1});
  }

  absl::Status Error(size_t offset, const std::string& msg) {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
    return absl::InvalidArgumentError(
        absl::StrCat(At(origin_, static_cast<int>(it - line_starts_.begin()) + 1,
                        static_cast<int>(offset - *it) + 1),
                     msg));
  }

  size_t SkipSpace(size_t p) const {
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    return p;
  }

  // Tokens of one {{ ... }} or {% ... %} tag whose opening ends before `p`; returns the offset
  // after the tag and the whitespace its end marker consumes.
  absl::StatusOr<size_t> LexTag(size_t begin, size_t p, bool block) {
    const size_t n = src_.size();
    Emit(block ? Tok::kBlockBegin : Tok::kVarBegin, begin);
    int depth = 0;  // open brackets: `}}` inside {'a': {'b': 1}} does not end the tag
    for (;;) {
      p = SkipSpace(p);
      if (p >= n)
        return Error(begin,
                     block ? "unterminated tag: expected '%}'" : "unterminated tag: expected '}}'");
      if (depth == 0) {
        const bool minus = src_[p] == '-', plus = block && src_[p] == '+';
        const size_t q = p + ((minus || plus) ? 1 : 0);
        if (q + 1 < n && src_[q] == (block ? '%' : '}') && src_[q + 1] == '}') {
          Emit(block ? Tok::kBlockEnd : Tok::kVarEnd, p);
          size_t after = q + 2;
          if (minus) {
            after = SkipSpace(after);
          } else if (block && !plus && after < n && src_[after] == '\n') {
            ++after;  // trim_blocks
          }
          return after;
        }
      }
      HAP_RETURN_IF_ERROR(LexOne(&p, &depth));
    }
  }

  absl::Status LexOne(size_t* pos, int* depth) {
    const size_t n = src_.size(), p = *pos;
    const char c = src_[p];
    auto digit = [&](size_t i) {
      return i < n && std::isdigit(static_cast<unsigned char>(src_[i]));
    };
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t q = p;
      while (q < n && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
      Emit(Tok::kName, p, src_.substr(p, q - p));
      *pos = q;
      return absl::OkStatus();
    }
    if (digit(p)) {
      size_t q = p;
      while (digit(q) || (q < n && src_[q] == '_')) ++q;
      bool is_float = false;
      const bool after_dot = p > 0 && src_[p - 1] == '.';  // `a.0.1` is two subscripts
      if (!after_dot && q + 1 < n && src_[q] == '.' && digit(q + 1)) {
        is_float = true;
        for (++q; digit(q) || (q < n && src_[q] == '_');) ++q;
      }
      if (!after_dot && q < n && (src_[q] == 'e' || src_[q] == 'E')) {
        size_t r = q + 1;
        if (r < n && (src_[r] == '+' || src_[r] == '-')) ++r;
        if (digit(r)) {
          is_float = true;
          for (q = r; digit(q) || (q < n && src_[q] == '_');) ++q;
        }
      }
      std::string literal = src_.substr(p, q - p);
      literal.erase(std::remove(literal.begin(), literal.end(), '_'), literal.end());
      errno = 0;
      Json value = is_float
                       ? Json(std::strtod(literal.c_str(), nullptr))
                       : Json(static_cast<int64_t>(std::strtoll(literal.c_str(), nullptr, 10)));
      if (errno == ERANGE) return Error(p, "number literal out of range");
      Emit(Tok::kNumber, p, std::move(literal), std::move(value));
      *pos = q;
      return absl::OkStatus();
    }
    if (c == '\'' || c == '"') {
      std::string value;
      size_t q = p + 1;
      for (; q < n && src_[q] != c; ++q) {
        if (src_[q] != '\\' || q + 1 >= n) {
          value += src_[q];
          continue;
        }
        HAP_RETURN_IF_ERROR(Unescape(&q, &value));
      }
      if (q >= n) return Error(p, "unterminated string literal");
      Emit(Tok::kString, p, std::move(value));
      *pos = q + 1;
      return absl::OkStatus();
    }
    static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo) {
      if (src_.compare(p, 2, op) == 0) {
        Emit(Tok::kOp, p, op);
        *pos = p + 2;
        return absl::OkStatus();
      }
    }
    if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos) {
      return Error(p, absl::StrCat("unexpected character '", std::string(1, c), "'"));
    }
    if (c == '(' || c == '[' || c == '{') ++*depth;
    if (c == ')' || c == ']' || c == '}') {
      if (*depth == 0) return Error(p, absl::StrCat("unexpected '", std::string(1, c), "'"));
      --*depth;
    }
    Emit(Tok::kOp, p, std::string(1, c));
    *pos = p + 1;
    return absl::OkStatus();
  }

  // A backslash escape in a string literal at *q (Python's unicode-escape); leaves *q on its
  // last character.
  absl::Status Unescape(size_t* q, std::string* out) {
    const size_t start = *q;
    const char e = src_[++*q];
    auto hex = [&](int count) -> absl::Status {
      uint32_t cp = 0;
      for (int i = 0; i < count; ++i) {
        const size_t k = *q + 1;
        if (k >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[k]))) {
          return Error(start, "truncated \\x, \\u or \\U escape in string literal");
        }
        cp = cp * 16 + static_cast<uint32_t>(std::stoi(std::string(1, src_[k]), nullptr, 16));
        ++*q;
      }
      if (cp > 0x10FFFF) return Error(start, "escape beyond U+10FFFF in string literal");
      unicode::AppendUtf8(cp, out);
      return absl::OkStatus();
    };
    switch (e) {
      case 'n':
        *out += '\n';
        break;
      case 't':
        *out += '\t';
        break;
      case 'r':
        *out += '\r';
        break;
      case 'a':
        *out += '\a';
        break;
      case 'b':
        *out += '\b';
        break;
      case 'f':
        *out += '\f';
        break;
      case 'v':
        *out += '\v';
        break;
      case '\\':
      case '\'':
      case '"':
        *out += e;
        break;
      case '\n':
        break;  // line continuation
      case 'x':
        return hex(2);
      case 'u':
        return hex(4);
      case 'U':
        return hex(8);
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = e - '0';
          for (int i = 0;
               i < 2 && *q + 1 < src_.size() && src_[*q + 1] >= '0' && src_[*q + 1] <= '7'; ++i) {
            cp = cp * 8 + (src_[++*q] - '0');
          }
          unicode::AppendUtf8(cp, out);
        } else {
          *out += '\\';
          *out += e;
        }
    }
    return absl::OkStatus();
  }

  const std::string& src_;
  const std::string& origin_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(const std::string& src, const std::string& origin) {
  return Lexer(src, origin).Run();
}

}  // namespace chat_template_internal
}  // namespace hap
