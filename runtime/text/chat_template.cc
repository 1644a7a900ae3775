// The chat-template interpreter: a lexer (Jinja's tag and whitespace rules) feeds a
// recursive-descent parser (Jinja's grammar and precedence) that builds an AST, which a
// tree-walking renderer evaluates over nlohmann::json values with Python semantics.
#include "runtime/text/chat_template.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace hap {
namespace chat_template_internal {

using Json = nlohmann::json;

constexpr int kMaxNesting = 200;       // parser recursion and expression height
constexpr int64_t kMaxRange = 100000;  // Jinja's sandbox MAX_RANGE
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
// The fuzz build (HAP_FUZZ) scales the render limits below down so that an input reaching one
// stays quick under ASan; the checks are the same.
constexpr int64_t kLimitScale = 1024;
#else
constexpr int64_t kLimitScale = 1;
#endif
constexpr int64_t kMaxIterations = (int64_t{1} << 20) / kLimitScale;
constexpr size_t kMaxOutputBytes = (size_t{64} << 20) / kLimitScale;
// JSON nodes (a string counts one per 64 bytes) the expressions of one render may make: bounds
// the work the limits above leave open, such as slicing a long list in every loop iteration
// (quadratic) or a list repeated to millions of items before a loop walks it.
constexpr int64_t kMaxMadeNodes = (int64_t{1} << 22) / kLimitScale;

// ------------------------------------------------------------------------------------------
// Tokens and AST

enum class Tok {
  kText,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kNumber,
  kOp,
  kEnd
};

struct Token {
  Tok kind;
  std::string text;  // template text, name, operator, or the decoded string literal
  Json number;       // kNumber: an integer or a float
  int line = 1, col = 1;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kConst,
    kName,
    kList,
    kDict,
    kAttr,
    kItem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kNeg,
    kPos,
    kNot,
    kBinary,
    kCompare,
    kAnd,
    kOr,
    kCond
  };
  Kind kind;
  int line = 0, col = 0;
  int height = 1;
  std::shared_ptr<const Json> constant;  // kConst
  std::string name;  // kName variable, kAttr attribute, kBinary operator, kFilter/kTest name
  // Operands. kDict: key, value, key, value...; kSlice: object, start, stop, step (null when
  // absent); kCall/kFilter/kTest: callee or subject, then positional arguments; kCond: then,
  // condition, else (null when absent).
  std::vector<ExprPtr> kids;
  std::vector<std::string> ops;                         // kCompare: one per right operand
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // kCall/kFilter/kTest
  bool negated = false;                                 // kTest: `is not`
};

struct Stmt;

struct Block {
  std::vector<std::unique_ptr<Stmt>> stmts;
};

struct Stmt {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kBreak, kContinue, kGeneration };
  Kind kind;
  int line = 0, col = 0;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kSet value, kFor iterable
  ExprPtr filter;                    // kFor `if` filter
  std::vector<std::string> targets;  // kFor/kSet names; kSet attribute: {namespace, attribute}
  bool attr_target = false;
  std::vector<std::pair<ExprPtr, Block>> branches;  // kIf: (condition or null for else, body)
  Block body, else_body;                            // kFor, kSetBlock, kGeneration
};

namespace {

std::string At(const std::string& origin, int line, int col) {
  return absl::StrCat(origin, ": line ", line, ":", col, ": ");
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The characters (code points) of a UTF-8 string, as Python indexes them.
std::vector<std::string> Chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t j = i + 1;
    while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

// ------------------------------------------------------------------------------------------
// Lexer: splits the template into text and tags the way Jinja's lexer does with trim_blocks and
// lstrip_blocks, and tokenizes the expressions inside tags.

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
      AppendUtf8(cp, out);
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
          AppendUtf8(cp, out);
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

// ------------------------------------------------------------------------------------------
// Parser: Jinja's grammar, precedence lowest first: `x if c else y`, or, and, not, comparisons
// and in, + -, ~, * / // %, **, unary - +, primary with postfix . [] () and then | filters and
// `is` tests.

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& origin)
      : toks_(std::move(tokens)), origin_(origin) {}

  absl::Status ParseTemplate(Block* out) {
    std::string found;
    return ParseBlock(out, {}, nullptr, &found);
  }

 private:
  struct Guard {  // bounds the parser's recursion
    explicit Guard(int* d) : depth(d) { ++*depth; }
    ~Guard() { --*depth; }
    int* depth;
  };

  const Token& Cur() const { return toks_[pos_]; }
  const Token& Ahead(size_t k) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  bool AtOp(const char* op) const { return Cur().kind == Tok::kOp && Cur().text == op; }
  bool AtName(const char* name) const { return Cur().kind == Tok::kName && Cur().text == name; }

  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case Tok::kEnd:
        return "end of template";
      case Tok::kText:
        return "template text";
      case Tok::kVarBegin:
        return "'{{'";
      case Tok::kVarEnd:
        return "'}}'";
      case Tok::kBlockBegin:
        return "'{%'";
      case Tok::kBlockEnd:
        return "'%}'";
      case Tok::kString:
        return "a string literal";
      case Tok::kNumber:
        return absl::StrCat("number ", t.text);
      default:
        return absl::StrCat("'", t.text, "'");
    }
  }

  absl::Status ErrorAt(const Token& t, const std::string& msg) const {
    return absl::InvalidArgumentError(At(origin_, t.line, t.col) + msg);
  }
  absl::Status Expected(const std::string& what) const {
    return ErrorAt(Cur(), absl::StrCat("expected ", what, ", got ", Describe(Cur())));
  }
  absl::Status ExpectOp(const char* op) {
    if (!AtOp(op)) return Expected(absl::StrCat("'", op, "'"));
    ++pos_;
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().kind != Tok::kBlockEnd) return Expected("'%}'");
    ++pos_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName(const char* what) {
    if (Cur().kind != Tok::kName) return Expected(what);
    return toks_[pos_++].text;
  }

  // Statements up to one of `stops` (an end tag, else, elif), whose name is returned in *found
  // with the tag consumed up to its '%}'.
  absl::Status ParseBlock(Block* out, const std::vector<std::string>& stops, const Token* opener,
                          std::string* found) {
    Guard guard(&depth_);
    if (depth_ > kMaxNesting) return ErrorAt(Cur(), "blocks nested too deeply");
    for (;;) {
      const Token& t = Cur();
      if (t.kind == Tok::kText) {
        auto s = NewStmt(Stmt::Kind::kText, t);
        s->text = t.text;
        out->stmts.push_back(std::move(s));
        ++pos_;
      } else if (t.kind == Tok::kVarBegin) {
        auto s = NewStmt(Stmt::Kind::kOutput, t);
        ++pos_;
        HAP_ASSIGN_OR_RETURN(s->expr, ParseExpr(true));
        if (Cur().kind != Tok::kVarEnd) return Expected("'}}'");
        ++pos_;
        out->stmts.push_back(std::move(s));
      } else if (t.kind == Tok::kBlockBegin) {
        const Token& kw = Ahead(1);
        if (kw.kind != Tok::kName) {
          ++pos_;
          return Expected("a statement name");
        }
        if (std::find(stops.begin(), stops.end(), kw.text) != stops.end()) {
          *found = kw.text;
          pos_ += 2;
          return absl::OkStatus();
        }
        static const char* const kStructural[] = {"endfor", "endif",  "else",
                                                  "elif",   "endset", "endgeneration"};
        if (std::find(std::begin(kStructural), std::end(kStructural), kw.text) !=
            std::end(kStructural)) {
          return ErrorAt(kw, stops.empty()
                                 ? absl::StrCat("unexpected '", kw.text, "'")
                                 : absl::StrCat("expected ", Quoted(stops), " (to close '",
                                                opener->text, "' at line ", opener->line, ":",
                                                opener->col, "), got '", kw.text, "'"));
        }
        HAP_RETURN_IF_ERROR(ParseStatement(out));
      } else if (t.kind == Tok::kEnd) {
        if (stops.empty()) return absl::OkStatus();
        return ErrorAt(
            t, absl::StrCat("expected ", Quoted(stops), " (to close '", opener->text, "' at line ",
                            opener->line, ":", opener->col, "), got end of template"));
      } else {
        return Expected("template text or a tag");
      }
    }
  }

  static std::string Quoted(const std::vector<std::string>& names) {
    std::vector<std::string> q;
    for (const auto& n : names) q.push_back(absl::StrCat("'", n, "'"));
    return absl::StrJoin(q, " or ");
  }

  std::unique_ptr<Stmt> NewStmt(Stmt::Kind kind, const Token& t) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = t.line;
    s->col = t.col;
    return s;
  }

  // After `{%`: the statement named by the current token.
  absl::Status ParseStatement(Block* out) {
    const Token& kw = toks_[++pos_];
    ++pos_;
    std::string found;
    if (kw.text == "for") {
      auto s = NewStmt(Stmt::Kind::kFor, kw);
      for (;;) {
        HAP_ASSIGN_OR_RETURN(std::string target, ExpectName("a loop variable name"));
        s->targets.push_back(std::move(target));
        if (!AtOp(",")) break;
        ++pos_;
      }
      if (!AtName("in")) return Expected("'in'");
      ++pos_;
      HAP_ASSIGN_OR_RETURN(s->expr, ParseExpr(false));  // a trailing `if` filters the loop
      if (AtName("if")) {
        ++pos_;
        HAP_ASSIGN_OR_RETURN(s->filter, ParseExpr(true));
      }
      if (AtName("recursive")) return ErrorAt(Cur(), "recursive loops are not supported");
      HAP_RETURN_IF_ERROR(ExpectBlockEnd());
      ++loop_depth_;
      HAP_RETURN_IF_ERROR(ParseBlock(&s->body, {"else", "endfor"}, &kw, &found));
      --loop_depth_;
      if (found == "else") {
        HAP_RETURN_IF_ERROR(ExpectBlockEnd());
        HAP_RETURN_IF_ERROR(ParseBlock(&s->else_body, {"endfor"}, &kw, &found));
      }
      HAP_RETURN_IF_ERROR(ExpectBlockEnd());
      out->stmts.push_back(std::move(s));
    } else if (kw.text == "if") {
      auto s = NewStmt(Stmt::Kind::kIf, kw);
      for (found = "elif"; found == "elif";) {
        HAP_ASSIGN_OR_RETURN(ExprPtr cond, ParseExpr(true));
        HAP_RETURN_IF_ERROR(ExpectBlockEnd());
        Block body;
        HAP_RETURN_IF_ERROR(ParseBlock(&body, {"elif", "else", "endif"}, &kw, &found));
        s->branches.emplace_back(std::move(cond), std::move(body));
      }
      if (found == "else") {
        HAP_RETURN_IF_ERROR(ExpectBlockEnd());
        Block body;
        HAP_RETURN_IF_ERROR(ParseBlock(&body, {"endif"}, &kw, &found));
        s->branches.emplace_back(nullptr, std::move(body));
      }
      HAP_RETURN_IF_ERROR(ExpectBlockEnd());
      out->stmts.push_back(std::move(s));
    } else if (kw.text == "set") {
      auto s = NewStmt(Stmt::Kind::kSet, kw);
      HAP_ASSIGN_OR_RETURN(std::string first, ExpectName("a variable name"));
      s->targets.push_back(std::move(first));
      if (AtOp(".")) {
        ++pos_;
        HAP_ASSIGN_OR_RETURN(std::string attr, ExpectName("an attribute name"));
        s->targets.push_back(std::move(attr));
        s->attr_target = true;
      } else {
        while (AtOp(",")) {
          ++pos_;
          HAP_ASSIGN_OR_RETURN(std::string more, ExpectName("a variable name"));
          s->targets.push_back(std::move(more));
        }
      }
      if (AtOp("=")) {
        ++pos_;
        HAP_ASSIGN_OR_RETURN(s->expr, ParseExpr(true));
        HAP_RETURN_IF_ERROR(ExpectBlockEnd());
      } else if (!s->attr_target && s->targets.size() == 1 && Cur().kind == Tok::kBlockEnd) {
        s->kind = Stmt::Kind::kSetBlock;
        ++pos_;
        HAP_RETURN_IF_ERROR(ParseBlock(&s->body, {"endset"}, &kw, &found));
        HAP_RETURN_IF_ERROR(ExpectBlockEnd());
      } else {
        return Expected("'='");
      }
      out->stmts.push_back(std::move(s));
    } else if (kw.text == "generation") {
      auto s = NewStmt(Stmt::Kind::kGeneration, kw);
      HAP_RETURN_IF_ERROR(ExpectBlockEnd());
      HAP_RETURN_IF_ERROR(ParseBlock(&s->body, {"endgeneration"}, &kw, &found));
      HAP_RETURN_IF_ERROR(ExpectBlockEnd());
      out->stmts.push_back(std::move(s));
    } else if (kw.text == "break" || kw.text == "continue") {
      if (loop_depth_ == 0) return ErrorAt(kw, absl::StrCat("'", kw.text, "' outside a for loop"));
      auto s = NewStmt(kw.text == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, kw);
      HAP_RETURN_IF_ERROR(ExpectBlockEnd());
      out->stmts.push_back(std::move(s));
    } else {
      return ErrorAt(kw, absl::StrCat("unsupported tag '", kw.text,
                                      "' (supported: for, if, set, generation, break, continue)"));
    }
    return absl::OkStatus();
  }

  // A node at token `t` over `kids`; fails when the expression grows too deep to evaluate.
  absl::StatusOr<ExprPtr> Node(Expr::Kind kind, const Token& t, std::vector<ExprPtr> kids = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = t.line;
    e->col = t.col;
    for (const auto& k : kids) {
      if (k) e->height = std::max(e->height, k->height + 1);
    }
    e->kids = std::move(kids);
    if (e->height > kMaxNesting) return ErrorAt(t, "expression nested too deeply");
    return e;
  }

  // Accounts for a kid added to `e` after Node() built it.
  absl::Status Grow(Expr* e, const Expr& kid) const {
    e->height = std::max(e->height, kid.height + 1);
    if (e->height > kMaxNesting)
      return absl::InvalidArgumentError(At(origin_, e->line, e->col) +
                                        "expression nested too deeply");
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> Binary(Expr::Kind kind, const Token& t, std::string op, ExprPtr a,
                                 ExprPtr b) {
    std::vector<ExprPtr> kids;
    kids.push_back(std::move(a));
    kids.push_back(std::move(b));
    HAP_ASSIGN_OR_RETURN(ExprPtr e, Node(kind, t, std::move(kids)));
    e->name = std::move(op);
    return e;
  }

  absl::StatusOr<ExprPtr> ParseExpr(bool with_cond) {
    Guard guard(&depth_);
    if (depth_ > kMaxNesting) return ErrorAt(Cur(), "expression nested too deeply");
    HAP_ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
    while (with_cond && AtName("if")) {
      const Token& t = toks_[pos_++];
      HAP_ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
      ExprPtr otherwise;
      if (AtName("else")) {
        ++pos_;
        HAP_ASSIGN_OR_RETURN(otherwise, ParseExpr(true));
      }
      std::vector<ExprPtr> kids;
      kids.push_back(std::move(e));
      kids.push_back(std::move(cond));
      kids.push_back(std::move(otherwise));
      HAP_ASSIGN_OR_RETURN(e, Node(Expr::Kind::kCond, t, std::move(kids)));
    }
    return e;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    HAP_ASSIGN_OR_RETURN(ExprPtr e, ParseAnd());
    while (AtName("or")) {
      const Token& t = toks_[pos_++];
      HAP_ASSIGN_OR_RETURN(ExprPtr rhs, ParseAnd());
      HAP_ASSIGN_OR_RETURN(e, Binary(Expr::Kind::kOr, t, "or", std::move(e), std::move(rhs)));
    }
    return e;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    HAP_ASSIGN_OR_RETURN(ExprPtr e, ParseNot());
    while (AtName("and")) {
      const Token& t = toks_[pos_++];
      HAP_ASSIGN_OR_RETURN(ExprPtr rhs, ParseNot());
      HAP_ASSIGN_OR_RETURN(e, Binary(Expr::Kind::kAnd, t, "and", std::move(e), std::move(rhs)));
    }
    return e;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (!AtName("not")) return ParseCompare();
    Guard guard(&depth_);
    if (depth_ > kMaxNesting) return ErrorAt(Cur(), "expression nested too deeply");
    const Token& t = toks_[pos_++];
    HAP_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
    std::vector<ExprPtr> kids;
    kids.push_back(std::move(operand));
    return Node(Expr::Kind::kNot, t, std::move(kids));
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const Token& t = Cur();
    HAP_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    std::vector<ExprPtr> kids;
    std::vector<std::string> ops;
    kids.push_back(std::move(first));
    for (;;) {
      std::string op;
      if (Cur().kind == Tok::kOp &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
           Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        ++pos_;
      } else if (AtName("in")) {
        op = "in";
        ++pos_;
      } else if (AtName("not") && Ahead(1).kind == Tok::kName && Ahead(1).text == "in") {
        op = "not in";
        pos_ += 2;
      } else {
        break;
      }
      HAP_ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath1());
      kids.push_back(std::move(rhs));
      ops.push_back(std::move(op));
    }
    if (ops.empty()) return std::move(kids[0]);
    HAP_ASSIGN_OR_RETURN(ExprPtr e, Node(Expr::Kind::kCompare, t, std::move(kids)));
    e->ops = std::move(ops);
    return e;
  }

  // One left-associative level of binary operators.
  absl::StatusOr<ExprPtr> ParseLevel(std::initializer_list<const char*> ops,
                                     absl::StatusOr<ExprPtr> (Parser::*next)()) {
    HAP_ASSIGN_OR_RETURN(ExprPtr e, (this->*next)());
    for (;;) {
      const char* op = nullptr;
      for (const char* o : ops) {
        if (AtOp(o)) op = o;
      }
      if (op == nullptr) return e;
      const Token& t = toks_[pos_++];
      HAP_ASSIGN_OR_RETURN(ExprPtr rhs, (this->*next)());
      HAP_ASSIGN_OR_RETURN(e, Binary(Expr::Kind::kBinary, t, op, std::move(e), std::move(rhs)));
    }
  }
  absl::StatusOr<ExprPtr> ParseMath1() { return ParseLevel({"+", "-"}, &Parser::ParseConcat); }
  absl::StatusOr<ExprPtr> ParseConcat() { return ParseLevel({"~"}, &Parser::ParseMath2); }
  absl::StatusOr<ExprPtr> ParseMath2() {
    return ParseLevel({"*", "/", "//", "%"}, &Parser::ParsePow);
  }
  absl::StatusOr<ExprPtr> ParsePow() { return ParseLevel({"**"}, &Parser::ParseUnaryFiltered); }
  absl::StatusOr<ExprPtr> ParseUnaryFiltered() { return ParseUnary(true); }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    Guard guard(&depth_);
    if (depth_ > kMaxNesting) return ErrorAt(Cur(), "expression nested too deeply");
    ExprPtr e;
    if (AtOp("-") || AtOp("+")) {
      const Token& t = toks_[pos_++];
      HAP_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      std::vector<ExprPtr> kids;
      kids.push_back(std::move(operand));
      HAP_ASSIGN_OR_RETURN(
          e, Node(t.text == "-" ? Expr::Kind::kNeg : Expr::Kind::kPos, t, std::move(kids)));
    } else {
      HAP_ASSIGN_OR_RETURN(e, ParsePrimary());
    }
    HAP_ASSIGN_OR_RETURN(e, ParsePostfix(std::move(e)));
    if (!with_filter) return e;
    for (;;) {
      if (AtOp("|")) {
        const Token& t = toks_[pos_++];
        HAP_ASSIGN_OR_RETURN(std::string name, ExpectName("a filter name"));
        std::vector<ExprPtr> kids;
        kids.push_back(std::move(e));
        HAP_ASSIGN_OR_RETURN(e, Node(Expr::Kind::kFilter, t, std::move(kids)));
        e->name = std::move(name);
        if (AtOp("(")) HAP_RETURN_IF_ERROR(ParseCallArgs(e.get()));
      } else if (AtName("is")) {
        const Token& t = toks_[pos_++];
        const bool negated = AtName("not");
        if (negated) ++pos_;
        HAP_ASSIGN_OR_RETURN(std::string name, ExpectName("a test name"));
        std::vector<ExprPtr> kids;
        kids.push_back(std::move(e));
        HAP_ASSIGN_OR_RETURN(e, Node(Expr::Kind::kTest, t, std::move(kids)));
        e->name = std::move(name);
        e->negated = negated;
        const Tok k = Cur().kind;
        if (AtOp("(")) {
          HAP_RETURN_IF_ERROR(ParseCallArgs(e.get()));
        } else if ((k == Tok::kName || k == Tok::kString || k == Tok::kNumber || AtOp("[") ||
                    AtOp("{")) &&
                   !AtName("else") && !AtName("or") && !AtName("and") && !AtName("is")) {
          HAP_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());  // `x is divisibleby 3`
          HAP_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          HAP_RETURN_IF_ERROR(Grow(e.get(), *arg));
          e->kids.push_back(std::move(arg));
        }
      } else if (AtOp("(")) {
        HAP_ASSIGN_OR_RETURN(e, ParseCall(std::move(e)));
      } else {
        return e;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    if (t.kind == Tok::kName) {
      ++pos_;
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False" ||
          t.text == "none" || t.text == "None") {
        const bool is_none = t.text == "none" || t.text == "None";
        return Const(t, is_none ? Json(nullptr) : Json(t.text == "true" || t.text == "True"));
      }
      HAP_ASSIGN_OR_RETURN(ExprPtr e, Node(Expr::Kind::kName, t));
      e->name = t.text;
      return e;
    }
    if (t.kind == Tok::kString) {
      std::string s;
      while (Cur().kind == Tok::kString) s += toks_[pos_++].text;  // adjacent literals join
      return Const(t, Json(std::move(s)));
    }
    if (t.kind == Tok::kNumber) {
      ++pos_;
      return Const(t, t.number);
    }
    if (AtOp("(") || AtOp("[")) {  // a parenthesized expression, a tuple or a list
      const bool paren = AtOp("(");
      const char* close = paren ? ")" : "]";
      ++pos_;
      std::vector<ExprPtr> items;
      bool tuple = !paren;
      while (!AtOp(close)) {
        HAP_ASSIGN_OR_RETURN(ExprPtr item, ParseExpr(true));
        items.push_back(std::move(item));
        if (!AtOp(",")) break;
        tuple = true;
        ++pos_;
      }
      HAP_RETURN_IF_ERROR(ExpectOp(close));
      if (paren && !tuple && items.size() == 1) return std::move(items[0]);
      return Node(Expr::Kind::kList, t, std::move(items));
    }
    if (AtOp("{")) {
      ++pos_;
      std::vector<ExprPtr> items;
      while (!AtOp("}")) {
        HAP_ASSIGN_OR_RETURN(ExprPtr key, ParseExpr(true));
        HAP_RETURN_IF_ERROR(ExpectOp(":"));
        HAP_ASSIGN_OR_RETURN(ExprPtr value, ParseExpr(true));
        items.push_back(std::move(key));
        items.push_back(std::move(value));
        if (!AtOp(",")) break;
        ++pos_;
      }
      HAP_RETURN_IF_ERROR(ExpectOp("}"));
      return Node(Expr::Kind::kDict, t, std::move(items));
    }
    return Expected("an expression");
  }

  absl::StatusOr<ExprPtr> Const(const Token& t, Json value) {
    HAP_ASSIGN_OR_RETURN(ExprPtr e, Node(Expr::Kind::kConst, t));
    e->constant = std::make_shared<const Json>(std::move(value));
    return e;
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr e) {
    for (;;) {
      const Token& t = Cur();
      if (AtOp(".")) {
        ++pos_;
        std::vector<ExprPtr> kids;
        kids.push_back(std::move(e));
        if (Cur().kind == Tok::kNumber && Cur().number.is_number_integer()) {  // `a.0` is a[0]
          HAP_ASSIGN_OR_RETURN(ExprPtr index, Const(Cur(), Cur().number));
          ++pos_;
          kids.push_back(std::move(index));
          HAP_ASSIGN_OR_RETURN(e, Node(Expr::Kind::kItem, t, std::move(kids)));
          continue;
        }
        HAP_ASSIGN_OR_RETURN(std::string name, ExpectName("an attribute name"));
        HAP_ASSIGN_OR_RETURN(e, Node(Expr::Kind::kAttr, t, std::move(kids)));
        e->name = std::move(name);
      } else if (AtOp("[")) {
        ++pos_;
        HAP_ASSIGN_OR_RETURN(e, ParseSubscript(t, std::move(e)));
      } else if (AtOp("(")) {
        HAP_ASSIGN_OR_RETURN(e, ParseCall(std::move(e)));
      } else {
        return e;
      }
    }
  }

  // After `[`: an index `a[i]` or a slice `a[start:stop:step]`.
  absl::StatusOr<ExprPtr> ParseSubscript(const Token& t, ExprPtr object) {
    std::vector<ExprPtr> parts;  // start, stop, step
    bool slice = false;
    for (int i = 0; i < 3; ++i) {
      ExprPtr part;
      if (!AtOp(":") && !AtOp("]")) {
        HAP_ASSIGN_OR_RETURN(part, ParseExpr(true));
      }
      parts.push_back(std::move(part));
      if (i == 2 || !AtOp(":")) break;
      slice = true;
      ++pos_;
    }
    HAP_RETURN_IF_ERROR(ExpectOp("]"));
    std::vector<ExprPtr> kids;
    kids.push_back(std::move(object));
    if (!slice) {
      if (!parts[0]) return ErrorAt(t, "expected an index or a slice, got '[]'");
      kids.push_back(std::move(parts[0]));
      return Node(Expr::Kind::kItem, t, std::move(kids));
    }
    parts.resize(3);
    for (auto& p : parts) kids.push_back(std::move(p));
    return Node(Expr::Kind::kSlice, t, std::move(kids));
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    const int line = callee->line, col = callee->col;
    std::vector<ExprPtr> kids;
    kids.push_back(std::move(callee));
    HAP_ASSIGN_OR_RETURN(ExprPtr e, Node(Expr::Kind::kCall, Cur(), std::move(kids)));
    e->line = line;  // errors of a call point at what is called
    e->col = col;
    HAP_RETURN_IF_ERROR(ParseCallArgs(e.get()));
    return e;
  }

  // `(a, b, key=c)` appended to e's kids and kwargs.
  absl::Status ParseCallArgs(Expr* e) {
    HAP_RETURN_IF_ERROR(ExpectOp("("));
    while (!AtOp(")")) {
      if (AtOp("*") || AtOp("**")) return ErrorAt(Cur(), "*args and **kwargs are not supported");
      const bool keyword =
          Cur().kind == Tok::kName && Ahead(1).kind == Tok::kOp && Ahead(1).text == "=";
      std::string key = keyword ? Cur().text : "";
      if (keyword) pos_ += 2;
      HAP_ASSIGN_OR_RETURN(ExprPtr arg, ParseExpr(true));
      HAP_RETURN_IF_ERROR(Grow(e, *arg));
      if (keyword) {
        e->kwargs.emplace_back(std::move(key), std::move(arg));
      } else {
        e->kids.push_back(std::move(arg));
      }
      if (!AtOp(",")) break;
      ++pos_;
    }
    return ExpectOp(")");
  }

  std::vector<Token> toks_;
  const std::string& origin_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

// ------------------------------------------------------------------------------------------
// Values: JSON data shared without copying (a child aliases its parent's storage), plus what
// JSON lacks: Jinja's Undefined, namespace objects and functions.

struct Value;
struct Namespace;
using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;

struct Value {
  enum class Kind { kUndefined, kData, kNamespace, kFunction };
  Kind kind = Kind::kUndefined;
  std::shared_ptr<const Json> data;  // kData
  std::shared_ptr<Namespace> ns;     // kNamespace: shared and mutable, as in Jinja
  std::shared_ptr<const std::function<absl::StatusOr<Value>(const Args&, const Kwargs&)>> fn;
  std::string what;  // kUndefined: the error Jinja reports when it is used ("'x' is undefined")

  bool is_data() const { return kind == Kind::kData; }
  const Json& json() const { return *data; }
};

struct Namespace {
  std::map<std::string, Value> attrs;
};

Value Undefined(std::string what) {
  Value v;
  v.what = std::move(what);
  return v;
}

Value Data(Json j) {
  Value v;
  v.kind = Value::Kind::kData;
  v.data = std::make_shared<const Json>(std::move(j));
  return v;
}

Value Child(const Value& parent, const Json& child) {
  Value v;
  v.kind = Value::Kind::kData;
  v.data = std::shared_ptr<const Json>(parent.data, &child);
  return v;
}

Value Function(std::function<absl::StatusOr<Value>(const Args&, const Kwargs&)> f) {
  Value v;
  v.kind = Value::Kind::kFunction;
  v.fn = std::make_shared<const std::function<absl::StatusOr<Value>(const Args&, const Kwargs&)>>(
      std::move(f));
  return v;
}

absl::Status Err(std::string msg) { return absl::InvalidArgumentError(std::move(msg)); }
absl::Status UndefinedError(const Value& v) {
  return Err(v.what.empty() ? "value is undefined" : v.what);
}

bool IsNone(const Value& v) { return !v.is_data() ? false : v.json().is_null(); }
bool Absent(const Value& v) { return v.kind == Value::Kind::kUndefined || IsNone(v); }
bool IsStr(const Value& v) { return v.is_data() && v.json().is_string(); }
bool IsInt(const Value& v) {
  return v.is_data() && (v.json().is_number_integer() || v.json().is_boolean());
}
bool IsNum(const Value& v) {
  return v.is_data() && (v.json().is_number() || v.json().is_boolean());
}
int64_t AsInt(const Json& j) { return j.is_boolean() ? (j.get<bool>() ? 1 : 0) : j.get<int64_t>(); }
double AsFloat(const Json& j) {
  return j.is_boolean() ? (j.get<bool>() ? 1.0 : 0.0) : j.get<double>();
}
const std::string& S(const Value& v) { return v.json().get_ref<const std::string&>(); }

std::string TypeName(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kFunction:
      return "function";
    case Value::Kind::kData:
      break;
  }
  switch (v.json().type()) {
    case Json::value_t::null:
      return "NoneType";
    case Json::value_t::boolean:
      return "bool";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "int";
    case Json::value_t::number_float:
      return "float";
    case Json::value_t::string:
      return "str";
    case Json::value_t::array:
      return "list";
    case Json::value_t::object:
      return "dict";
    default:
      return "object";
  }
}

// Python's repr(float): the shortest digits that round-trip, in exponent form below 1e-4 and
// from 1e16 up.
std::string PyFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string_view s(buf);
  std::string sign, digits;
  if (s.front() == '-') {
    sign = "-";
    s.remove_prefix(1);
  }
  const size_t e = s.find('e');
  for (char c : s.substr(0, e)) {
    if (c != '.') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int exponent = std::atoi(std::string(s.substr(e + 1)).c_str());
  const int point = exponent + 1;  // digits are 0.DDD x 10^point
  const int n = static_cast<int>(digits.size());
  if (point > -4 && point <= 16) {
    if (point <= 0) return sign + "0." + std::string(-point, '0') + digits;
    if (point >= n) return sign + digits + std::string(point - n, '0') + ".0";
    return sign + digits.substr(0, point) + "." + digits.substr(point);
  }
  char exp[16];
  std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return sign + digits.substr(0, 1) + (n > 1 ? "." + digits.substr(1) : "") + exp;
}

// Python's repr(str).
std::string PyQuote(const std::string& s) {
  const char q =
      (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == q || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

void Repr(const Json& j, std::string* out) {
  switch (j.type()) {
    case Json::value_t::boolean:
      *out += j.get<bool>() ? "True" : "False";
      return;
    case Json::value_t::number_integer:
      *out += std::to_string(j.get<int64_t>());
      return;
    case Json::value_t::number_unsigned:
      *out += std::to_string(j.get<uint64_t>());
      return;
    case Json::value_t::number_float:
      *out += PyFloat(j.get<double>());
      return;
    case Json::value_t::string:
      *out += PyQuote(j.get_ref<const std::string&>());
      return;
    case Json::value_t::array: {
      *out += '[';
      for (size_t i = 0; i < j.size(); ++i) {
        if (i > 0) *out += ", ";
        Repr(j[i], out);
      }
      *out += ']';
      return;
    }
    case Json::value_t::object: {
      *out += '{';
      bool first = true;
      for (const auto& [k, v] : j.items()) {
        if (!first) *out += ", ";
        first = false;
        *out += PyQuote(k) + ": ";
        Repr(v, out);
      }
      *out += '}';
      return;
    }
    default:
      *out += "None";
      return;
  }
}

Json ToJson(const Value& v) {
  if (v.is_data()) return v.json();
  if (v.kind != Value::Kind::kNamespace) return nullptr;
  Json obj = Json::object();
  for (const auto& [k, a] : v.ns->attrs) obj[k] = ToJson(a);
  return obj;
}

// Python's str(): what {{ v }} writes.
std::string Str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kFunction:
      return "<function>";
    case Value::Kind::kNamespace: {
      std::string out = "<Namespace ";
      Repr(ToJson(v), &out);
      return out + ">";
    }
    case Value::Kind::kData:
      break;
  }
  if (v.json().is_string()) return S(v);
  std::string out;
  Repr(v.json(), &out);
  return out;
}

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// json.dumps(j, ensure_ascii=False, indent=indent) with indent < 0 meaning None.
void JsonDump(const Json& j, int indent, int level, std::string* out) {
  switch (j.type()) {
    case Json::value_t::null:
      *out += "null";
      return;
    case Json::value_t::boolean:
      *out += j.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::number_float: {
      const double d = j.get<double>();
      *out += std::isnan(d)   ? "NaN"
              : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                              : PyFloat(d);
      return;
    }
    case Json::value_t::string:
      *out += JsonQuote(j.get_ref<const std::string&>());
      return;
    case Json::value_t::array:
    case Json::value_t::object: {
      const bool is_array = j.is_array();
      if (j.empty()) {
        *out += is_array ? "[]" : "{}";
        return;
      }
      *out += is_array ? '[' : '{';
      bool first = true;
      for (const auto& [k, v] : j.items()) {
        if (!first) *out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) *out += "\n" + std::string(indent * (level + 1), ' ');
        if (!is_array) *out += JsonQuote(k) + ": ";
        JsonDump(v, indent, level + 1, out);
      }
      if (indent >= 0) *out += "\n" + std::string(indent * level, ' ');
      *out += is_array ? ']' : '}';
      return;
    }
    default:
      Repr(j, out);
      return;  // numbers
  }
}

bool Truthy(const Value& v) {
  if (v.kind != Value::Kind::kData) return v.kind != Value::Kind::kUndefined;
  const Json& j = v.json();
  switch (j.type()) {
    case Json::value_t::boolean:
      return j.get<bool>();
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return j.get<int64_t>() != 0;
    case Json::value_t::number_float:
      return j.get<double>() != 0;
    case Json::value_t::string:
      return !j.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object:
      return !j.empty();
    default:
      return false;
  }
}

bool JsonEq(const Json& a, const Json& b) {
  const bool an = a.is_number() || a.is_boolean(), bn = b.is_number() || b.is_boolean();
  if (an && bn) {
    if (!a.is_number_float() && !b.is_number_float()) return AsInt(a) == AsInt(b);
    return AsFloat(a) == AsFloat(b);
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!JsonEq(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a.items()) {
      const auto it = b.find(k);
      if (it == b.end() || !JsonEq(v, *it)) return false;
    }
    return true;
  }
  return a == b;
}

bool Equal(const Value& a, const Value& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
      return true;
    case Value::Kind::kNamespace:
      return a.ns == b.ns;
    case Value::Kind::kFunction:
      return a.fn == b.fn;
    case Value::Kind::kData:
      return JsonEq(a.json(), b.json());
  }
  return false;
}

// Python's ordering of numbers, strings and lists: negative, zero or positive.
absl::StatusOr<int> Order(const Value& a, const Value& b, const std::string& op) {
  if (a.kind == Value::Kind::kUndefined) return UndefinedError(a);
  if (b.kind == Value::Kind::kUndefined) return UndefinedError(b);
  if (IsNum(a) && IsNum(b)) {
    if (IsInt(a) && IsInt(b))
      return AsInt(a.json()) < AsInt(b.json()) ? -1 : AsInt(a.json()) > AsInt(b.json());
    const double x = AsFloat(a.json()), y = AsFloat(b.json());
    return x < y ? -1 : x > y;
  }
  if (IsStr(a) && IsStr(b)) return S(a).compare(S(b));
  if (a.is_data() && b.is_data() && a.json().is_array() && b.json().is_array()) {
    const Json &x = a.json(), &y = b.json();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!JsonEq(x[i], y[i])) return Order(Child(a, x[i]), Child(b, y[i]), op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  return Err(absl::StrCat("'", op, "' not supported between instances of '", TypeName(a), "' and '",
                          TypeName(b), "'"));
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
  std::vector<Value> out;
  if (v.kind == Value::Kind::kUndefined) return out;  // Undefined iterates as empty
  if (!v.is_data()) return Err(absl::StrCat("'", TypeName(v), "' object is not iterable"));
  const Json& j = v.json();
  if (j.is_array()) {
    for (const Json& item : j) out.push_back(Child(v, item));
  } else if (j.is_object()) {
    for (const auto& [k, unused] : j.items()) out.push_back(Data(k));
  } else if (j.is_string()) {
    for (auto& c : Chars(S(v))) out.push_back(Data(std::move(c)));
  } else {
    return Err(absl::StrCat("'", TypeName(v), "' object is not iterable"));
  }
  return out;
}

absl::StatusOr<int64_t> Length(const Value& v) {
  if (v.kind == Value::Kind::kUndefined) return 0;
  if (v.is_data() && v.json().is_string()) {
    return static_cast<int64_t>(std::count_if(S(v).begin(), S(v).end(), [](char c) {
      return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    }));
  }
  if (v.is_data() && (v.json().is_array() || v.json().is_object())) {
    return static_cast<int64_t>(v.json().size());
  }
  return Err(absl::StrCat("object of type '", TypeName(v), "' has no len()"));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  if (container.kind == Value::Kind::kUndefined) return false;
  if (IsStr(container)) {
    if (!IsStr(item)) {
      return Err(
          absl::StrCat("'in <string>' requires string as left operand, not ", TypeName(item)));
    }
    return S(container).find(S(item)) != std::string::npos;
  }
  if (container.is_data() && container.json().is_array()) {
    for (const Json& x : container.json()) {
      if (Equal(Child(container, x), item)) return true;
    }
    return false;
  }
  if (container.is_data() && container.json().is_object()) {
    return IsStr(item) && container.json().contains(S(item));
  }
  return Err(absl::StrCat("argument of type '", TypeName(container), "' is not iterable"));
}

// a.b: a mapping's key or a namespace's attribute; anything else is undefined.
Value GetAttr(const Value& obj, const std::string& name) {
  if (obj.kind == Value::Kind::kNamespace) {
    const auto it = obj.ns->attrs.find(name);
    if (it != obj.ns->attrs.end()) return it->second;
  } else if (obj.is_data() && obj.json().is_object()) {
    const auto it = obj.json().find(name);
    if (it != obj.json().end()) return Child(obj, *it);
  } else if (obj.kind == Value::Kind::kUndefined) {
    return obj;
  }
  return Undefined(absl::StrCat("'", TypeName(obj), " object' has no attribute '", name, "'"));
}

// a[key]: a key, or an index (negative from the end) into a list or string.
Value GetItem(const Value& obj, const Value& key) {
  if (IsStr(key) &&
      (obj.kind == Value::Kind::kNamespace || (obj.is_data() && obj.json().is_object()))) {
    return GetAttr(obj, S(key));
  }
  if (obj.kind == Value::Kind::kUndefined) return obj;
  if (IsInt(key) && obj.is_data() && (obj.json().is_array() || obj.json().is_string())) {
    const Json& j = obj.json();
    std::vector<std::string> chars;
    if (j.is_string()) chars = Chars(S(obj));
    const int64_t n =
        j.is_array() ? static_cast<int64_t>(j.size()) : static_cast<int64_t>(chars.size());
    int64_t i = AsInt(key.json());
    if (i < 0) i += n;
    if (i >= 0 && i < n) return j.is_array() ? Child(obj, j[i]) : Data(chars[i]);
  }
  return Undefined(absl::StrCat("'", TypeName(obj), " object' has no item ", Str(key)));
}

// a[start:stop:step] with Python's index rules.
absl::StatusOr<Value> SliceOf(const Value& obj, const Value& start, const Value& stop,
                              const Value& step) {
  for (const Value* v : {&start, &stop, &step}) {
    if (!Absent(*v) && !IsInt(*v)) return Err("slice indices must be integers or None");
  }
  if (!obj.is_data() || !(obj.json().is_array() || obj.json().is_string())) {
    return obj.kind == Value::Kind::kUndefined
               ? obj
               : Undefined(absl::StrCat("'", TypeName(obj), "' object is not subscriptable"));
  }
  const Json& j = obj.json();
  std::vector<std::string> chars;
  if (j.is_string()) chars = Chars(S(obj));
  const int64_t n =
      j.is_array() ? static_cast<int64_t>(j.size()) : static_cast<int64_t>(chars.size());
  int64_t st = Absent(step) ? 1 : AsInt(step.json());
  if (st == 0) return Err("slice step cannot be zero");
  st = std::clamp<int64_t>(st, -(n + 1), n + 1);  // larger steps behave alike; avoids overflow
  auto adjust = [&](const Value& bound, int64_t dflt) {
    if (Absent(bound)) return dflt;
    int64_t v = AsInt(bound.json());
    if (v < 0) {
      v += n;
      if (v < 0) v = st < 0 ? -1 : 0;
    } else if (v >= n) {
      v = st < 0 ? n - 1 : n;
    }
    return v;
  };
  const int64_t lo = adjust(start, st < 0 ? n - 1 : 0), hi = adjust(stop, st < 0 ? -1 : n);
  Json arr = Json::array();
  std::string str;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
    if (j.is_array()) {
      arr.push_back(j[i]);
    } else {
      str += chars[i];
    }
  }
  return j.is_array() ? Data(std::move(arr)) : Data(std::move(str));
}

// ------------------------------------------------------------------------------------------
// Operators

int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

absl::StatusOr<Value> Arith(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Data(Str(a) + Str(b));
  if (a.kind == Value::Kind::kUndefined) return UndefinedError(a);
  if (b.kind == Value::Kind::kUndefined) return UndefinedError(b);
  if (IsNum(a) && IsNum(b)) {
    const bool zero = !Truthy(b);
    if ((op == "/" || op == "//" || op == "%") && zero) {
      return Err(op == "%" ? "modulo by zero" : "division by zero");
    }
    if (IsInt(a) && IsInt(b) && op != "/") {
      const int64_t x = AsInt(a.json()), y = AsInt(b.json());
      int64_t r = 0;
      bool overflow = false;
      if (op == "+") {
        overflow = __builtin_add_overflow(x, y, &r);
      } else if (op == "-") {
        overflow = __builtin_sub_overflow(x, y, &r);
      } else if (op == "*") {
        overflow = __builtin_mul_overflow(x, y, &r);
      } else if (op == "//" || op == "%") {
        overflow = x == INT64_MIN && y == -1;
        if (!overflow) r = op == "//" ? FloorDiv(x, y) : x - FloorDiv(x, y) * y;
      } else {  // **
        if (y < 0) return Data(std::pow(static_cast<double>(x), static_cast<double>(y)));
        r = 1;
        for (int64_t base = x, e = y; e > 0 && !overflow; e >>= 1) {
          if (e & 1) overflow = __builtin_mul_overflow(r, base, &r);
          if (e > 1 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
        }
      }
      if (overflow) return Err(absl::StrCat("integer overflow in '", op, "'"));
      return Data(r);
    }
    const double x = AsFloat(a.json()), y = AsFloat(b.json());
    if (op == "+") return Data(x + y);
    if (op == "-") return Data(x - y);
    if (op == "*") return Data(x * y);
    if (op == "/") return Data(x / y);
    if (op == "//") return Data(std::floor(x / y));
    if (op == "**") return Data(std::pow(x, y));
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Data(r);
  }
  const absl::Status unsupported = Err(absl::StrCat("unsupported operand type(s) for ", op, ": '",
                                                    TypeName(a), "' and '", TypeName(b), "'"));
  if (!a.is_data() || !b.is_data()) return unsupported;  // namespaces, functions
  const Json &x = a.json(), &y = b.json();
  if (op == "+" && x.is_string() && y.is_string()) return Data(S(a) + S(b));
  if (op == "+" && x.is_array() && y.is_array()) {
    Json r = x;
    r.insert(r.end(), y.begin(), y.end());
    return Data(std::move(r));
  }
  if (op == "*" && ((IsInt(a) && (y.is_string() || y.is_array())) ||
                    (IsInt(b) && (x.is_string() || x.is_array())))) {
    const Json& seq = IsInt(a) ? y : x;
    const int64_t times = std::max<int64_t>(0, AsInt(IsInt(a) ? x : y));
    const size_t unit = seq.is_string() ? seq.get_ref<const std::string&>().size() : seq.size();
    const uint64_t limit = seq.is_string() ? kMaxOutputBytes : kMaxMadeNodes;
    if (unit > 0 && static_cast<uint64_t>(times) > limit / unit) {
      return Err("repetition result too large");
    }
    Json r = seq.is_string() ? Json("") : Json::array();
    for (int64_t i = 0; i < times; ++i) {
      if (seq.is_string()) {
        r.get_ref<std::string&>() += seq.get_ref<const std::string&>();
      } else {
        r.insert(r.end(), seq.begin(), seq.end());
      }
    }
    return Data(std::move(r));
  }
  return unsupported;
}

absl::StatusOr<bool> CompareOp(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return Equal(a, b);
  if (op == "!=") return !Equal(a, b);
  if (op == "in" || op == "not in") {
    HAP_ASSIGN_OR_RETURN(const bool in, Contains(b, a));
    return in == (op == "in");
  }
  HAP_ASSIGN_OR_RETURN(const int c, Order(a, b, op));
  return op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
}

// ------------------------------------------------------------------------------------------
// Strings (ASCII case mapping; other bytes pass through)

constexpr char kWhitespace[] = " \t\n\r\f\v";

std::string MapCase(std::string s, int (*f)(int)) {
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(c));
  }
  return s;
}
std::string Upper(const std::string& s) { return MapCase(s, ::toupper); }
std::string Lower(const std::string& s) { return MapCase(s, ::tolower); }

std::string Capitalize(const std::string& s) {
  std::string out = Lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

// str.title() when `word_breaks` is null (a letter after a non-letter starts a word), Jinja's
// |title when it lists the characters that end a word.
std::string Title(const std::string& s, const char* word_breaks) {
  std::string out;
  bool in_word = false;
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (word_breaks ? std::strchr(word_breaks, ch) != nullptr || IsSpace(ch)
                    : !std::isalpha(c) && c < 0x80) {
      out += ch;
      in_word = false;
    } else {
      out += c >= 0x80 ? ch : static_cast<char>(in_word ? std::tolower(c) : std::toupper(c));
      in_word = true;
    }
  }
  return out;
}

std::string Strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::string set = Absent(chars) ? kWhitespace : Str(chars);
  size_t b = 0, e = s.size();
  while (left && b < e && set.find(s[b]) != std::string::npos) ++b;
  while (right && e > b && set.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every character
    const auto chars = Chars(s);
    for (size_t i = 0; i <= chars.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += to;
      if (i < chars.size()) out += chars[i];
    }
    return out;
  }
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  return out + s.substr(pos);
}

// str.split(sep=None, maxsplit=-1).
absl::StatusOr<Json> Split(const std::string& s, const Value& sep, int64_t maxsplit) {
  Json out = Json::array();
  if (Absent(sep)) {  // runs of whitespace; no empty strings
    size_t i = s.find_first_not_of(kWhitespace);
    while (i != std::string::npos) {
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(Strip(s.substr(i), Value(), false, true));
        break;
      }
      const size_t e = std::min(s.find_first_of(kWhitespace, i), s.size());
      out.push_back(s.substr(i, e - i));
      i = s.find_first_not_of(kWhitespace, e);
    }
    return out;
  }
  const std::string d = Str(sep);
  if (d.empty()) return Err("empty separator");
  size_t pos = 0;
  for (size_t hit; (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) &&
                   (hit = s.find(d, pos)) != std::string::npos;
       pos = hit + d.size()) {
    out.push_back(s.substr(pos, hit - pos));
  }
  out.push_back(s.substr(pos));
  return out;
}

// Python-style binding of positional and keyword arguments to `params`; an argument not given
// is Undefined.
absl::StatusOr<std::vector<Value>> Bind(const std::string& fname, const Args& args,
                                        const Kwargs& kwargs,
                                        std::initializer_list<const char*> params,
                                        size_t required = 0) {
  const std::vector<std::string> names(params.begin(), params.end());
  if (args.size() > names.size()) {
    return Err(absl::StrCat(fname, "() takes at most ", names.size(), " argument(s), ", args.size(),
                            " given"));
  }
  std::vector<Value> out(args.begin(), args.end());
  out.resize(names.size());
  for (const auto& [key, value] : kwargs) {
    const auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) {
      return Err(absl::StrCat(fname, "() got an unexpected keyword argument '", key, "'"));
    }
    out[it - names.begin()] = value;
  }
  for (size_t i = 0; i < required; ++i) {
    if (out[i].kind == Value::Kind::kUndefined) {
      return Err(absl::StrCat(fname, "() missing required argument '", names[i], "'"));
    }
  }
  return out;
}

absl::StatusOr<int64_t> IntArg(const std::string& fname, const Value& v, int64_t dflt) {
  if (Absent(v)) return dflt;
  if (!IsInt(v)) return Err(absl::StrCat(fname, "() needs an integer, got '", TypeName(v), "'"));
  return AsInt(v.json());
}

// ------------------------------------------------------------------------------------------
// Methods of str and dict values

bool IsMethod(const Value& obj, const std::string& name) {
  static const char* const kStr[] = {"strip",    "lstrip", "rstrip",     "upper",
                                     "lower",    "title",  "capitalize", "startswith",
                                     "endswith", "split",  "replace",    "join"};
  static const char* const kDict[] = {"get", "items", "keys", "values"};
  if (IsStr(obj)) return std::find(std::begin(kStr), std::end(kStr), name) != std::end(kStr);
  return obj.is_data() && obj.json().is_object() &&
         std::find(std::begin(kDict), std::end(kDict), name) != std::end(kDict);
}

absl::StatusOr<Value> CallMethod(const Value& obj, const std::string& name, const Args& args,
                                 const Kwargs& kwargs) {
  const std::string fname = absl::StrCat(TypeName(obj), ".", name);
  auto bind = [&](std::initializer_list<const char*> params, size_t required = 0) {
    return Bind(fname, args, kwargs, params, required);
  };
  if (obj.json().is_object()) {
    const Json& j = obj.json();
    if (name == "get") {
      HAP_ASSIGN_OR_RETURN(auto a, bind({"key", "default"}, 1));
      const auto it = IsStr(a[0]) ? j.find(S(a[0])) : j.end();
      if (it != j.end()) return Child(obj, *it);
      return a[1].kind == Value::Kind::kUndefined ? Data(nullptr) : a[1];
    }
    HAP_RETURN_IF_ERROR(bind({}).status());
    Json out = Json::array();
    for (const auto& [k, v] : j.items()) {
      out.push_back(name == "keys" ? Json(k) : name == "values" ? v : Json::array({k, v}));
    }
    return Data(std::move(out));
  }
  const std::string& s = S(obj);
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    HAP_ASSIGN_OR_RETURN(auto a, bind({"chars"}));
    return Data(Strip(s, a[0], name != "rstrip", name != "lstrip"));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    HAP_RETURN_IF_ERROR(bind({}).status());
    return Data(name == "upper"   ? Upper(s)
                : name == "lower" ? Lower(s)
                : name == "title" ? Title(s, nullptr)
                                  : Capitalize(s));
  }
  if (name == "startswith" || name == "endswith") {
    HAP_ASSIGN_OR_RETURN(auto a, bind({"prefix"}, 1));
    std::vector<Value> options;
    if (IsStr(a[0])) {
      options.push_back(a[0]);
    } else if (a[0].is_data() && a[0].json().is_array()) {
      HAP_ASSIGN_OR_RETURN(options, Iterate(a[0]));
    }
    for (const Value& o : options) {
      if (!IsStr(o)) break;
      const std::string& p = S(o);
      const bool hit = p.size() <= s.size() &&
                       (name == "startswith" ? s.compare(0, p.size(), p) == 0
                                             : s.compare(s.size() - p.size(), p.size(), p) == 0);
      if (hit) return Data(true);
    }
    if (options.empty() || !IsStr(options.back())) {
      return Err(absl::StrCat(fname, "() needs a string or a tuple of strings"));
    }
    return Data(false);
  }
  if (name == "split") {
    HAP_ASSIGN_OR_RETURN(auto a, bind({"sep", "maxsplit"}));
    HAP_ASSIGN_OR_RETURN(const int64_t maxsplit, IntArg(fname, a[1], -1));
    HAP_ASSIGN_OR_RETURN(Json parts, Split(s, a[0], maxsplit));
    return Data(std::move(parts));
  }
  if (name == "replace") {
    HAP_ASSIGN_OR_RETURN(auto a, bind({"old", "new", "count"}, 2));
    HAP_ASSIGN_OR_RETURN(const int64_t count, IntArg(fname, a[2], -1));
    return Data(Replace(s, Str(a[0]), Str(a[1]), count));
  }
  // join
  HAP_ASSIGN_OR_RETURN(auto a, bind({"iterable"}, 1));
  HAP_ASSIGN_OR_RETURN(const std::vector<Value> items, Iterate(a[0]));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!IsStr(items[i])) {
      return Err(absl::StrCat("sequence item ", i, ": expected str instance, ", TypeName(items[i]),
                              " found"));
    }
    if (i > 0) out += s;
    out += S(items[i]);
  }
  return Data(std::move(out));
}

// ------------------------------------------------------------------------------------------
// Tests (`x is name(args)`) and filters (`x | name(args)`)

absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const Args& args) {
  const Json* j = v.is_data() ? &v.json() : nullptr;
  if (name == "defined") return v.kind != Value::Kind::kUndefined;
  if (name == "undefined") return v.kind == Value::Kind::kUndefined;
  if (name == "none") return j && j->is_null();
  if (name == "boolean") return j && j->is_boolean();
  if (name == "true") return j && j->is_boolean() && j->get<bool>();
  if (name == "false") return j && j->is_boolean() && !j->get<bool>();
  if (name == "integer") return j && j->is_number_integer();
  if (name == "float") return j && j->is_number_float();
  if (name == "number") return IsNum(v);
  if (name == "string") return j && j->is_string();
  if (name == "mapping") return j && j->is_object();
  if (name == "iterable") {
    return v.kind == Value::Kind::kUndefined ||
           (j && (j->is_string() || j->is_array() || j->is_object()));
  }
  if (name == "sequence") return j && (j->is_string() || j->is_array() || j->is_object());
  if (name == "callable") return v.kind == Value::Kind::kFunction;
  if (name == "lower" || name == "upper") {
    const std::string s = Str(v);
    const bool cased = std::any_of(
        s.begin(), s.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
    return cased && s == (name == "lower" ? Lower(s) : Upper(s));
  }
  if (name == "even" || name == "odd" || name == "divisibleby") {
    Value divisor = Data(2);
    if (name == "divisibleby") {
      if (args.empty()) return Err("divisibleby test needs a divisor");
      divisor = args[0];
    }
    HAP_ASSIGN_OR_RETURN(const Value rem, Arith("%", v, divisor));
    return Truthy(rem) == (name == "odd");
  }
  static const std::map<std::string, std::string> kCompare = {
      {"eq", "=="}, {"equalto", "=="},    {"==", "=="}, {"ne", "!="}, {"!=", "!="},
      {"lt", "<"},  {"lessthan", "<"},    {"<", "<"},   {"le", "<="}, {"<=", "<="},
      {"gt", ">"},  {"greaterthan", ">"}, {">", ">"},   {"ge", ">="}, {">=", ">="},
      {"in", "in"}, {"sameas", "=="}};
  const auto it = kCompare.find(name);
  if (it == kCompare.end()) return Err(absl::StrCat("unknown test '", name, "'"));
  if (args.size() != 1) return Err(absl::StrCat("test '", name, "' takes one argument"));
  if (name == "sameas" && TypeName(v) != TypeName(args[0])) return false;
  return CompareOp(it->second, v, args[0]);
}

// `item.a.b` as selectattr, map and join(attribute=) read it: dotted names, integer parts index.
Value AttrPath(const Value& item, const Value& attribute) {
  if (IsInt(attribute)) return GetItem(item, attribute);
  Value v = item;
  const std::string path = Str(attribute);
  for (size_t b = 0, e; b <= path.size(); b = e + 1) {
    e = std::min(path.find('.', b), path.size());
    const std::string p = path.substr(b, e - b);
    const bool digits = !p.empty() && std::all_of(p.begin(), p.end(), ::isdigit);
    v = GetItem(v, digits ? Data(std::strtoll(p.c_str(), nullptr, 10)) : Data(p));
  }
  return v;
}

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const Args& args,
                                  const Kwargs& kwargs);

// select/reject/selectattr/rejectattr: the items for which a test (truthiness when none is
// named) passes, or fails for the reject forms.
absl::StatusOr<Value> SelectFilter(const std::string& name, const Value& v, const Args& args) {
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool keep_when = name == "select" || name == "selectattr";
  if (by_attr && args.empty()) return Err(absl::StrCat(name, "() needs an attribute name"));
  const size_t t = by_attr ? 1 : 0;  // index of the test name in args
  HAP_ASSIGN_OR_RETURN(const std::vector<Value> items, Iterate(v));
  Json out = Json::array();
  for (const Value& item : items) {
    const Value subject = by_attr ? AttrPath(item, args[0]) : item;
    bool pass;
    if (args.size() <= t) {
      pass = Truthy(subject);
    } else {
      HAP_ASSIGN_OR_RETURN(
          pass, ApplyTest(Str(args[t]), subject, Args(args.begin() + t + 1, args.end())));
    }
    if (pass == keep_when) out.push_back(ToJson(item));
  }
  return Data(std::move(out));
}

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const Args& args,
                                  const Kwargs& kwargs) {
  auto bind = [&](std::initializer_list<const char*> params, size_t required = 0) {
    return Bind(name, args, kwargs, params, required);
  };
  if (name == "safe") return v;
  if (name == "string") return Data(Str(v));
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    const std::string s = Str(v);
    return Data(name == "upper"        ? Upper(s)
                : name == "lower"      ? Lower(s)
                : name == "capitalize" ? Capitalize(s)
                                       : Title(s, "-({[<"));
  }
  if (name == "trim") {
    HAP_ASSIGN_OR_RETURN(auto a, bind({"chars"}));
    return Data(Strip(Str(v), a[0], true, true));
  }
  if (name == "replace") {
    HAP_ASSIGN_OR_RETURN(auto a, bind({"old", "new", "count"}, 2));
    HAP_ASSIGN_OR_RETURN(const int64_t count, IntArg(name, a[2], -1));
    return Data(Replace(Str(v), Str(a[0]), Str(a[1]), count));
  }
  if (name == "length" || name == "count") {
    HAP_ASSIGN_OR_RETURN(const int64_t n, Length(v));
    return Data(n);
  }
  if (name == "default" || name == "d") {
    HAP_ASSIGN_OR_RETURN(auto a, bind({"default_value", "boolean"}));
    const bool use = v.kind == Value::Kind::kUndefined || (Truthy(a[1]) && !Truthy(v));
    return use ? (a[0].kind == Value::Kind::kUndefined ? Data("") : a[0]) : v;
  }
  if (name == "tojson") {
    HAP_ASSIGN_OR_RETURN(auto a, bind({"ensure_ascii", "indent", "separators", "sort_keys"}));
    if (v.kind == Value::Kind::kUndefined || v.kind == Value::Kind::kFunction) {
      return Err(absl::StrCat("Object of type ", TypeName(v), " is not JSON serializable"));
    }
    HAP_ASSIGN_OR_RETURN(const int64_t indent, IntArg(name, a[1], -1));
    std::string out;
    JsonDump(ToJson(v), static_cast<int>(std::clamp<int64_t>(indent, -1, 64)), 0, &out);
    return Data(std::move(out));
  }
  if (name == "int" || name == "float") {
    HAP_ASSIGN_OR_RETURN(auto a, bind({"default"}));
    if (v.kind == Value::Kind::kUndefined) return UndefinedError(v);
    const Value dflt =
        a[0].kind == Value::Kind::kUndefined ? Data(name == "int" ? Json(0) : Json(0.0)) : a[0];
    double d;
    if (IsNum(v)) {
      d = AsFloat(v.json());
      if (name == "int" && IsInt(v)) return Data(AsInt(v.json()));
    } else if (IsStr(v)) {
      const std::string s = Strip(S(v), Value(), true, true);
      char* end = nullptr;
      errno = 0;
      d = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0' || errno == ERANGE) return dflt;
      if (name == "int" && s.find_first_not_of("+-0123456789") == std::string::npos) {
        return Data(static_cast<int64_t>(std::strtoll(s.c_str(), nullptr, 10)));
      }
    } else {
      return dflt;
    }
    if (name == "float") return Data(d);
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Data(static_cast<int64_t>(d));
  }
  if (name == "abs") {
    if (!IsNum(v)) return Err(absl::StrCat("bad operand type for abs(): '", TypeName(v), "'"));
    if (IsInt(v)) return Arith("*", v, Data(AsInt(v.json()) < 0 ? -1 : 1));
    return Data(std::fabs(AsFloat(v.json())));
  }
  if (name == "items") {
    if (v.kind == Value::Kind::kUndefined) return Data(Json::array());
    if (!v.is_data() || !v.json().is_object()) return Err("items filter needs a mapping");
    return CallMethod(v, "items", {}, {});
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return SelectFilter(name, v, args);
  }
  static const char* const kOverItems[] = {"first", "last", "list", "reverse", "join", "map"};
  if (std::find(std::begin(kOverItems), std::end(kOverItems), name) == std::end(kOverItems)) {
    return Err(absl::StrCat("unknown filter '", name, "'"));
  }
  HAP_ASSIGN_OR_RETURN(const std::vector<Value> items, Iterate(v));
  if (name == "first" || name == "last") {
    if (items.empty()) return Undefined(absl::StrCat("No ", name, " item, sequence was empty."));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list" || name == "reverse") {
    if (name == "reverse" && IsStr(v)) {
      std::string out;
      for (auto it = items.rbegin(); it != items.rend(); ++it) out += S(*it);
      return Data(std::move(out));
    }
    Json out = Json::array();
    for (const Value& item : items) out.push_back(ToJson(item));
    if (name == "reverse") std::reverse(out.begin(), out.end());
    return Data(std::move(out));
  }
  if (name == "join") {
    HAP_ASSIGN_OR_RETURN(auto a, bind({"d", "attribute"}));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += Str(a[0]);
      out += Str(Absent(a[1]) ? items[i] : AttrPath(items[i], a[1]));
    }
    return Data(std::move(out));
  }
  if (name == "map") {  // map(attribute='x', default=y) or map('filter', args...)
    Value attribute, dflt;
    Kwargs rest;
    for (const auto& [k, value] : kwargs) {
      if (k == "attribute") {
        attribute = value;
      } else if (k == "default") {
        dflt = value;
      } else {
        rest.emplace_back(k, value);
      }
    }
    if (attribute.kind == Value::Kind::kUndefined && args.empty()) {
      return Err("map() needs a filter name or attribute=");
    }
    Json out = Json::array();
    for (const Value& item : items) {
      Value r;
      if (attribute.kind != Value::Kind::kUndefined) {
        r = AttrPath(item, attribute);
        if (r.kind == Value::Kind::kUndefined && dflt.kind != Value::Kind::kUndefined) r = dflt;
      } else {
        HAP_ASSIGN_OR_RETURN(
            r, ApplyFilter(Str(args[0]), item, Args(args.begin() + 1, args.end()), rest));
      }
      out.push_back(ToJson(r));
    }
    return Data(std::move(out));
  }
  return Err(absl::StrCat("unknown filter '", name, "'"));
}

// ------------------------------------------------------------------------------------------
// Globals

std::map<std::string, Value> Globals() {
  std::map<std::string, Value> g;
  g["range"] = Function([](const Args& args, const Kwargs& kwargs) -> absl::StatusOr<Value> {
    if (!kwargs.empty() || args.empty() || args.size() > 3) {
      return Err("range() takes 1 to 3 positional arguments");
    }
    int64_t v[3] = {0, 0, 1};
    for (size_t i = 0; i < args.size(); ++i) {
      if (!IsInt(args[i]))
        return Err(absl::StrCat("range() needs integers, got '", TypeName(args[i]), "'"));
      v[args.size() == 1 ? 1 : i] = AsInt(args[i].json());
    }
    const int64_t start = v[0], stop = v[1], step = v[2];
    if (step == 0) return Err("range() arg 3 must not be zero");
    const double count = std::max(0.0, std::ceil((static_cast<double>(stop) - start) / step));
    if (count > kMaxRange) {
      return Err(absl::StrCat("range too big: the sandbox allows at most ", kMaxRange, " items"));
    }
    Json out = Json::array();
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) out.push_back(start + i * step);
    return Data(std::move(out));
  });
  auto make_namespace = [](const Args& args, const Kwargs& kwargs) -> absl::StatusOr<Value> {
    Value v;
    v.kind = Value::Kind::kNamespace;
    v.ns = std::make_shared<Namespace>();
    if (args.size() > 1) return Err("namespace() takes at most one positional argument");
    if (!args.empty()) {
      if (!args[0].is_data() || !args[0].json().is_object())
        return Err("namespace() needs a mapping");
      for (const auto& [k, unused] : args[0].json().items()) v.ns->attrs[k] = GetAttr(args[0], k);
    }
    for (const auto& [k, value] : kwargs) v.ns->attrs[k] = value;
    return v;
  };
  g["namespace"] = Function(make_namespace);
  g["dict"] =
      Function([make_namespace](const Args& args, const Kwargs& kwargs) -> absl::StatusOr<Value> {
        HAP_ASSIGN_OR_RETURN(const Value ns, make_namespace(args, kwargs));
        return Data(ToJson(ns));
      });
  g["raise_exception"] =
      Function([](const Args& args, const Kwargs& kwargs) -> absl::StatusOr<Value> {
        return Err(args.empty() ? "raise_exception() called" : Str(args[0]));
      });
  g["strftime_now"] = Function([](const Args& args, const Kwargs& kwargs) -> absl::StatusOr<Value> {
    if (args.size() != 1 || !IsStr(args[0])) return Err("strftime_now() needs a format string");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof(buf), S(args[0]).c_str(), &local);
    return Data(std::string(buf, n));
  });
  return g;
}

// ------------------------------------------------------------------------------------------
// Renderer: executes statements into out_, with a scope per loop iteration as Jinja has (a
// `set` inside a loop body is gone after the iteration; one inside `if` is not scoped).

// Nodes of `j` (see kMaxMadeNodes), counted up to just past `limit`; iterative, since a template
// can nest lists deeper than the stack would allow.
int64_t CountNodes(const Json& j, int64_t limit) {
  if (j.is_string()) return 1 + static_cast<int64_t>(j.get_ref<const std::string&>().size() / 64);
  if (!j.is_structured() || j.empty()) return 1;
  int64_t n = 0;
  std::vector<const Json*> todo = {&j};
  while (!todo.empty() && n <= limit) {
    const Json* node = todo.back();
    todo.pop_back();
    n += 1 + (node->is_string()
                  ? static_cast<int64_t>(node->get_ref<const std::string&>().size() / 64)
                  : 0);
    if (node->is_structured()) {
      for (const Json& child : *node) todo.push_back(&child);
    }
  }
  return n;
}

class Renderer {
 public:
  explicit Renderer(const std::string& origin) : origin_(origin) { scopes_.push_back(Globals()); }

  absl::StatusOr<std::string> Render(const Block& body, std::map<std::string, Value> context) {
    scopes_.push_back(std::move(context));
    HAP_RETURN_IF_ERROR(Exec(body));
    return std::move(out_);
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  template <typename Node>
  absl::Status Fail(const Node& at, absl::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat(At(origin_, at.line, at.col), msg));
  }
  // An error of a builtin, located at the node that called it.
  template <typename Node, typename T>
  absl::StatusOr<T> Located(const Node& at, absl::StatusOr<T> r) const {
    if (r.ok()) return r;
    return Fail(at, r.status().message());
  }

  Value Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      const auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Undefined(absl::StrCat("'", name, "' is undefined"));
  }

  absl::Status Assign(const Stmt& s, const std::vector<std::string>& names, const Value& v,
                      std::map<std::string, Value>* scope) {
    if (names.size() == 1) {
      (*scope)[names[0]] = v;
      return absl::OkStatus();
    }
    HAP_ASSIGN_OR_RETURN(const std::vector<Value> items, Located(s, Iterate(v)));
    if (items.size() != names.size()) {
      return Fail(s, absl::StrCat(items.size() < names.size() ? "not enough" : "too many",
                                  " values to unpack (expected ", names.size(), ", got ",
                                  items.size(), ")"));
    }
    for (size_t i = 0; i < names.size(); ++i) (*scope)[names[i]] = items[i];
    return absl::OkStatus();
  }

  absl::Status Write(const Stmt& at, const std::string& s) {
    if (out_.size() + s.size() > kMaxOutputBytes) {
      return Fail(at, absl::StrCat("rendered text exceeds ", kMaxOutputBytes >> 20, " MiB"));
    }
    out_ += s;
    return absl::OkStatus();
  }

  absl::Status Exec(const Block& block) {
    for (const auto& s : block.stmts) {
      HAP_RETURN_IF_ERROR(Exec(*s));
      if (flow_ != Flow::kNormal) break;
    }
    return absl::OkStatus();
  }

  absl::Status Exec(const Stmt& s) {
    switch (s.kind) {
      case Stmt::Kind::kText:
        return Write(s, s.text);
      case Stmt::Kind::kOutput: {
        HAP_ASSIGN_OR_RETURN(const Value v, Eval(*s.expr));
        return Write(s, Str(v));
      }
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches) {
          bool take = true;
          if (cond) {
            HAP_ASSIGN_OR_RETURN(const Value c, Eval(*cond));
            take = Truthy(c);
          }
          if (take) return Exec(body);
        }
        return absl::OkStatus();
      case Stmt::Kind::kFor:
        return ExecFor(s);
      case Stmt::Kind::kSet: {
        HAP_ASSIGN_OR_RETURN(const Value v, Eval(*s.expr));
        if (!s.attr_target) return Assign(s, s.targets, v, &scopes_.back());
        const Value ns = Lookup(s.targets[0]);
        if (ns.kind != Value::Kind::kNamespace) {
          return Fail(s, absl::StrCat("cannot assign attribute on non-namespace object '",
                                      s.targets[0], "'"));
        }
        ns.ns->attrs[s.targets[1]] = v;
        return absl::OkStatus();
      }
      case Stmt::Kind::kSetBlock: {
        std::string saved;
        std::swap(saved, out_);
        const absl::Status st = Exec(s.body);
        std::swap(saved, out_);
        HAP_RETURN_IF_ERROR(st);
        scopes_.back()[s.targets[0]] = Data(std::move(saved));
        return absl::OkStatus();
      }
      case Stmt::Kind::kBreak:
        flow_ = Flow::kBreak;
        return absl::OkStatus();
      case Stmt::Kind::kContinue:
        flow_ = Flow::kContinue;
        return absl::OkStatus();
      case Stmt::Kind::kGeneration:
        return Exec(s.body);
    }
    return absl::OkStatus();
  }

  absl::Status ExecFor(const Stmt& s) {
    HAP_ASSIGN_OR_RETURN(const Value seq, Eval(*s.expr));
    HAP_ASSIGN_OR_RETURN(std::vector<Value> items, Located(*s.expr, Iterate(seq)));
    if (s.filter) {  // `for x in xs if cond`: loop.* counts only the kept items
      std::vector<Value> kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        absl::Status st = Assign(s, s.targets, item, &scopes_.back());
        absl::StatusOr<Value> keep = st.ok() ? Eval(*s.filter) : absl::StatusOr<Value>(st);
        scopes_.pop_back();
        if (!keep.ok()) return keep.status();
        if (Truthy(*keep)) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return Exec(s.else_body);
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      if (++iterations_ > kMaxIterations) {
        return Fail(s, absl::StrCat("more than ", kMaxIterations, " loop iterations"));
      }
      Json loop = {
          {"index", i + 1},  {"index0", i},        {"revindex", n - i}, {"revindex0", n - i - 1},
          {"first", i == 0}, {"last", i == n - 1}, {"length", n},       {"depth", 1},
          {"depth0", 0}};
      if (i > 0) loop["previtem"] = ToJson(items[i - 1]);
      if (i + 1 < n) loop["nextitem"] = ToJson(items[i + 1]);
      scopes_.emplace_back();
      scopes_.back()["loop"] = Data(std::move(loop));
      absl::Status st = Assign(s, s.targets, items[i], &scopes_.back());
      if (st.ok()) st = Exec(s.body);
      scopes_.pop_back();
      HAP_RETURN_IF_ERROR(st);
      const Flow flow = flow_;
      flow_ = Flow::kNormal;
      if (flow == Flow::kBreak) break;
    }
    return absl::OkStatus();
  }

  absl::Status EvalArgs(const Expr& e, size_t first, Args* args, Kwargs* kwargs) {
    for (size_t i = first; i < e.kids.size(); ++i) {
      HAP_ASSIGN_OR_RETURN(Value v, Eval(*e.kids[i]));
      args->push_back(std::move(v));
    }
    for (const auto& [k, arg] : e.kwargs) {
      HAP_ASSIGN_OR_RETURN(Value v, Eval(*arg));
      kwargs->emplace_back(k, std::move(v));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Value> EvalCall(const Expr& e) {
    const Expr& callee = *e.kids[0];
    Value fn;
    Value self;
    const bool method = callee.kind == Expr::Kind::kAttr;
    if (method) {
      HAP_ASSIGN_OR_RETURN(self, Eval(*callee.kids[0]));
      fn = GetAttr(self, callee.name);
    } else {
      HAP_ASSIGN_OR_RETURN(fn, Eval(callee));
    }
    Args args;
    Kwargs kwargs;
    HAP_RETURN_IF_ERROR(EvalArgs(e, 1, &args, &kwargs));
    if (method && IsMethod(self, callee.name)) {
      return Located(e, CallMethod(self, callee.name, args, kwargs));
    }
    if (fn.kind == Value::Kind::kFunction) return Located(e, (*fn.fn)(args, kwargs));
    if (fn.kind == Value::Kind::kUndefined) return Fail(e, fn.what);
    return Fail(e, absl::StrCat("'", TypeName(fn), "' object is not callable"));
  }

  // EvalNode, with what an expression makes counted against kMaxMadeNodes: a value no one else
  // holds was made here (names, constants, attributes and items share data made before; and/or
  // and the inline if pass on a value their operand already counted).
  absl::StatusOr<Value> Eval(const Expr& e) {
    HAP_ASSIGN_OR_RETURN(Value v, EvalNode(e));
    const bool passes_on = e.kind == Expr::Kind::kAnd || e.kind == Expr::Kind::kOr ||
                           e.kind == Expr::Kind::kCond || e.kind == Expr::Kind::kAttr ||
                           e.kind == Expr::Kind::kItem;
    if (!passes_on && v.is_data() && v.data.use_count() == 1) {
      made_ += CountNodes(v.json(), kMaxMadeNodes - made_);
      if (made_ > kMaxMadeNodes) {
        return Fail(e, absl::StrCat("the template makes more than ", kMaxMadeNodes,
                                    " values in one render"));
      }
    }
    return v;
  }

  absl::StatusOr<Value> EvalNode(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kConst: {
        Value v;
        v.kind = Value::Kind::kData;
        v.data = e.constant;
        return v;
      }
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList: {
        Json out = Json::array();
        for (const auto& k : e.kids) {
          HAP_ASSIGN_OR_RETURN(const Value v, Eval(*k));
          out.push_back(ToJson(v));
        }
        return Data(std::move(out));
      }
      case Expr::Kind::kDict: {
        Json out = Json::object();
        for (size_t i = 0; i + 1 < e.kids.size(); i += 2) {
          HAP_ASSIGN_OR_RETURN(const Value key, Eval(*e.kids[i]));
          HAP_ASSIGN_OR_RETURN(const Value value, Eval(*e.kids[i + 1]));
          if (!IsStr(key)) return Fail(*e.kids[i], "dict keys must be strings");
          out[S(key)] = ToJson(value);
        }
        return Data(std::move(out));
      }
      case Expr::Kind::kAttr: {
        HAP_ASSIGN_OR_RETURN(const Value obj, Eval(*e.kids[0]));
        return GetAttr(obj, e.name);
      }
      case Expr::Kind::kItem: {
        HAP_ASSIGN_OR_RETURN(const Value obj, Eval(*e.kids[0]));
        HAP_ASSIGN_OR_RETURN(const Value key, Eval(*e.kids[1]));
        return GetItem(obj, key);
      }
      case Expr::Kind::kSlice: {
        Value parts[4];
        for (int i = 0; i < 4; ++i) {
          if (e.kids[i]) {
            HAP_ASSIGN_OR_RETURN(parts[i], Eval(*e.kids[i]));
          }
        }
        return Located(e, SliceOf(parts[0], parts[1], parts[2], parts[3]));
      }
      case Expr::Kind::kCall:
        return EvalCall(e);
      case Expr::Kind::kFilter:
      case Expr::Kind::kTest: {
        HAP_ASSIGN_OR_RETURN(const Value subject, Eval(*e.kids[0]));
        Args args;
        Kwargs kwargs;
        HAP_RETURN_IF_ERROR(EvalArgs(e, 1, &args, &kwargs));
        if (e.kind == Expr::Kind::kFilter)
          return Located(e, ApplyFilter(e.name, subject, args, kwargs));
        if (!kwargs.empty()) return Fail(e, "tests take no keyword arguments");
        HAP_ASSIGN_OR_RETURN(const bool pass, Located(e, ApplyTest(e.name, subject, args)));
        return Data(pass != e.negated);
      }
      case Expr::Kind::kNeg:
      case Expr::Kind::kPos: {
        HAP_ASSIGN_OR_RETURN(const Value v, Eval(*e.kids[0]));
        if (v.kind == Value::Kind::kUndefined) return Fail(e, UndefinedError(v).message());
        if (!IsNum(v)) {
          return Fail(
              e, absl::StrCat("bad operand type for unary ", e.kind == Expr::Kind::kNeg ? "-" : "+",
                              ": '", TypeName(v), "'"));
        }
        if (e.kind == Expr::Kind::kPos) return IsInt(v) ? Data(AsInt(v.json())) : v;
        return Located(e, Arith("-", Data(0), v));
      }
      case Expr::Kind::kNot: {
        HAP_ASSIGN_OR_RETURN(const Value v, Eval(*e.kids[0]));
        return Data(!Truthy(v));
      }
      case Expr::Kind::kBinary: {
        HAP_ASSIGN_OR_RETURN(const Value a, Eval(*e.kids[0]));
        HAP_ASSIGN_OR_RETURN(const Value b, Eval(*e.kids[1]));
        return Located(e, Arith(e.name, a, b));
      }
      case Expr::Kind::kCompare: {  // a < b < c is a < b and b < c
        HAP_ASSIGN_OR_RETURN(Value left, Eval(*e.kids[0]));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          HAP_ASSIGN_OR_RETURN(Value right, Eval(*e.kids[i + 1]));
          HAP_ASSIGN_OR_RETURN(const bool ok, Located(e, CompareOp(e.ops[i], left, right)));
          if (!ok) return Data(false);
          left = std::move(right);
        }
        return Data(true);
      }
      case Expr::Kind::kAnd:
      case Expr::Kind::kOr: {  // Python returns the deciding operand
        HAP_ASSIGN_OR_RETURN(Value a, Eval(*e.kids[0]));
        if (Truthy(a) == (e.kind == Expr::Kind::kOr)) return a;
        return Eval(*e.kids[1]);
      }
      case Expr::Kind::kCond: {
        HAP_ASSIGN_OR_RETURN(const Value c, Eval(*e.kids[1]));
        if (Truthy(c)) return Eval(*e.kids[0]);
        if (e.kids[2]) return Eval(*e.kids[2]);
        return Undefined("the inline if had no else");
      }
    }
    return Undefined("");
  }

  const std::string& origin_;
  std::vector<std::map<std::string, Value>> scopes_;  // globals, render context, loop bodies
  std::string out_;
  Flow flow_ = Flow::kNormal;
  int64_t iterations_ = 0;
  int64_t made_ = 0;  // JSON nodes expressions made (kMaxMadeNodes)
};

// LLaVA-1.5's conversation format: llava-hf's chat_template.json for llava-1.5 (the image
// placeholders of a turn first, then its text; "USER: ... ASSISTANT:"). transformers renders it
// with trim_blocks and lstrip_blocks, as Render does. '<image>\n' is written as Jinja's escape.
constexpr char kLlava15[] =
    R"({% for message in messages %}{% if message['role'] != 'system' %})"
    R"({{ message['role'].upper() + ': '}}{% endif %}{# Render all images first #})"
    R"({% for content in message['content'] | selectattr('type', 'equalto', 'image') %})"
    R"({{ '<image>\n' }}{% endfor %}{# Render all text next #})"
    R"({% if message['role'] != 'assistant' %})"
    R"({% for content in message['content'] | selectattr('type', 'equalto', 'text') %})"
    R"({{ content['text'] + ' '}}{% endfor %}{% else %})"
    R"({% for content in message['content'] | selectattr('type', 'equalto', 'text') %})"
    R"({% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}{% endif %})"
    R"({% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %})";

absl::StatusOr<Json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read the file"));
  try {
    return Json::parse(text.str());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": malformed JSON: ", e.what()));
  }
}

}  // namespace
}  // namespace chat_template_internal

using chat_template_internal::Json;

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source, std::string origin) {
  // Jinja reads \r\n and \r as \n and drops the template's one trailing newline.
  std::string text;
  text.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      text += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      text += source[i];
    }
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  try {
    HAP_ASSIGN_OR_RETURN(std::vector<chat_template_internal::Token> tokens,
                         chat_template_internal::Lexer(text, origin).Run());
    auto body = std::make_shared<chat_template_internal::Block>();
    HAP_RETURN_IF_ERROR(
        chat_template_internal::Parser(std::move(tokens), origin).ParseTemplate(body.get()));
    ChatTemplate t;
    t.origin_ = std::move(origin);
    t.source_ = std::string(source);
    t.body_ = std::move(body);
    return t;
  } catch (const std::exception& e) {  // nlohmann or allocation failures; none are expected
    return absl::InternalError(
        absl::StrCat(origin, ": parsing the chat template failed: ", e.what()));
  }
}

ChatTemplate ChatTemplate::Llava15() {
  static const ChatTemplate* const kTemplate =
      new ChatTemplate(*Parse(chat_template_internal::kLlava15, "built-in LLaVA-1.5"));
  return *kTemplate;
}

absl::StatusOr<ChatTemplate> ChatTemplate::ForModelDir(const std::string& dir) {
  // The template is parsed under the file's path so that errors name it; origin() is its name.
  auto from = [](const std::string& path, const Json& source,
                 const std::string& name) -> absl::StatusOr<ChatTemplate> {
    if (!source.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": \"chat_template\" is not a string"));
    }
    HAP_ASSIGN_OR_RETURN(ChatTemplate t, Parse(source.get_ref<const std::string&>(), path));
    t.origin_ = name;
    return t;
  };
  std::error_code ec;
  const std::string processor = dir + "/chat_template.json";
  if (std::filesystem::exists(processor, ec)) {
    HAP_ASSIGN_OR_RETURN(const Json root, chat_template_internal::ReadJsonFile(processor));
    if (!root.is_object() || !root.contains("chat_template")) {
      return absl::InvalidArgumentError(absl::StrCat(processor, ": no \"chat_template\" key"));
    }
    return from(processor, root["chat_template"], "chat_template.json");
  }
  const std::string tokenizer = dir + "/tokenizer_config.json";
  if (std::filesystem::exists(tokenizer, ec)) {
    HAP_ASSIGN_OR_RETURN(const Json root, chat_template_internal::ReadJsonFile(tokenizer));
    if (!root.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(tokenizer, ": top level is not an object"));
    }
    const auto it = root.find("chat_template");
    if (it != root.end() && it->is_array()) {  // named templates: take "default"
      for (const Json& named : *it) {
        if (named.is_object() && named.value("name", Json()) == "default") {
          return from(tokenizer, named.value("template", Json()), "tokenizer_config.json");
        }
      }
      return absl::InvalidArgumentError(
          absl::StrCat(tokenizer, ": \"chat_template\" has no template named \"default\""));
    }
    if (it != root.end() && !it->is_null()) return from(tokenizer, *it, "tokenizer_config.json");
  }
  return Llava15();
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& messages,
                                                 bool add_generation_prompt,
                                                 const nlohmann::json& extra) const {
  using chat_template_internal::Data;
  if (!extra.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin_, ": extra variables must be a JSON object"));
  }
  try {
    std::map<std::string, chat_template_internal::Value> context;
    for (const auto& [k, v] : extra.items()) context[k] = Data(v);
    context["messages"] = Data(messages);
    context["add_generation_prompt"] = Data(add_generation_prompt);
    return chat_template_internal::Renderer(origin_).Render(*body_, std::move(context));
  } catch (const std::exception& e) {  // nlohmann or allocation failures; none are expected
    return absl::InternalError(
        absl::StrCat(origin_, ": rendering the chat template failed: ", e.what()));
  }
}

}  // namespace hap
