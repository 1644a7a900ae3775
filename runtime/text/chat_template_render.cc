// The chat-template renderer: executes statements into out_, with a scope per loop iteration as
// Jinja has (a `set` inside a loop body is gone after the iteration; one inside `if` is not
// scoped), evaluating expressions over the values of chat_template_values.cc.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "runtime/text/chat_template_internal.h"

namespace hap {
namespace chat_template_internal {
namespace {

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

// Whether `v` is the namespace `target` or holds it through namespace attributes.
bool HoldsNamespace(const Value& v, const Namespace* target) {
  if (v.kind != Value::Kind::kNamespace) return false;
  std::vector<const Namespace*> stack = {v.ns.get()};
  std::set<const Namespace*> seen;
  while (!stack.empty()) {
    const Namespace* n = stack.back();
    stack.pop_back();
    if (n == target) return true;
    if (!seen.insert(n).second) continue;
    for (const auto& [unused, a] : n->attrs) {
      if (a.kind == Value::Kind::kNamespace) stack.push_back(a.ns.get());
    }
  }
  return false;
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
        // Namespaces are shared: one holding itself, directly or through others, would be a
        // reference cycle that is never freed.
        if (HoldsNamespace(v, ns.ns.get())) {
          return Fail(s, absl::StrCat("cannot store namespace '", s.targets[0], "' inside itself (",
                                      s.targets[0], ".", s.targets[1], ")"));
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

}  // namespace

absl::StatusOr<std::string> RenderTemplate(const Block& body, const std::string& origin,
                                           std::map<std::string, Value> context) {
  return Renderer(origin).Render(body, std::move(context));
}

}  // namespace chat_template_internal
}  // namespace hap
