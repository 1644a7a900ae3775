// The chat-template parser: recursive descent over the lexer's tokens, building the AST of
// runtime/text/chat_template_internal.h.
#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "runtime/text/chat_template_internal.h"

namespace hap {
namespace chat_template_internal {
namespace {

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

  // A node with the one operand `a`.
  absl::StatusOr<ExprPtr> Unary(Expr::Kind kind, const Token& t, ExprPtr a) {
    std::vector<ExprPtr> kids;
    kids.push_back(std::move(a));
    return Node(kind, t, std::move(kids));
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

  // One left-associative level of a keyword operator (`or`, `and`).
  absl::StatusOr<ExprPtr> ParseKeywordLevel(const char* word, Expr::Kind kind,
                                            absl::StatusOr<ExprPtr> (Parser::*next)()) {
    HAP_ASSIGN_OR_RETURN(ExprPtr e, (this->*next)());
    while (AtName(word)) {
      const Token& t = toks_[pos_++];
      HAP_ASSIGN_OR_RETURN(ExprPtr rhs, (this->*next)());
      HAP_ASSIGN_OR_RETURN(e, Binary(kind, t, word, std::move(e), std::move(rhs)));
    }
    return e;
  }
  absl::StatusOr<ExprPtr> ParseOr() {
    return ParseKeywordLevel("or", Expr::Kind::kOr, &Parser::ParseAnd);
  }
  absl::StatusOr<ExprPtr> ParseAnd() {
    return ParseKeywordLevel("and", Expr::Kind::kAnd, &Parser::ParseNot);
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (!AtName("not")) return ParseCompare();
    Guard guard(&depth_);
    if (depth_ > kMaxNesting) return ErrorAt(Cur(), "expression nested too deeply");
    const Token& t = toks_[pos_++];
    HAP_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
    return Unary(Expr::Kind::kNot, t, std::move(operand));
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
      HAP_ASSIGN_OR_RETURN(
          e, Unary(t.text == "-" ? Expr::Kind::kNeg : Expr::Kind::kPos, t, std::move(operand)));
    } else {
      HAP_ASSIGN_OR_RETURN(e, ParsePrimary());
    }
    HAP_ASSIGN_OR_RETURN(e, ParsePostfix(std::move(e)));
    if (!with_filter) return e;
    for (;;) {
      if (AtOp("|")) {
        const Token& t = toks_[pos_++];
        HAP_ASSIGN_OR_RETURN(std::string name, ExpectName("a filter name"));
        HAP_ASSIGN_OR_RETURN(e, Unary(Expr::Kind::kFilter, t, std::move(e)));
        e->name = std::move(name);
        if (AtOp("(")) HAP_RETURN_IF_ERROR(ParseCallArgs(e.get()));
      } else if (AtName("is")) {
        const Token& t = toks_[pos_++];
        const bool negated = AtName("not");
        if (negated) ++pos_;
        HAP_ASSIGN_OR_RETURN(std::string name, ExpectName("a test name"));
        HAP_ASSIGN_OR_RETURN(e, Unary(Expr::Kind::kTest, t, std::move(e)));
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

}  // namespace

absl::Status ParseTemplate(std::vector<Token> tokens, const std::string& origin, Block* out) {
  return Parser(std::move(tokens), origin).ParseTemplate(out);
}

}  // namespace chat_template_internal
}  // namespace hap
