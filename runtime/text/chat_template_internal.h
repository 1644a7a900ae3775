// The chat-template interpreter's private interface (runtime/text/chat_template.h is the public
// one): the tokens and AST that the lexer and parser build, the values the renderer computes with,
// the builtins, and one entry point per stage. Only runtime/text/chat_template*.cc include it.
//   chat_template_lexer.cc     template text -> tokens (Jinja's tag and whitespace rules)
//   chat_template_parser.cc    tokens -> AST (Jinja's grammar and precedence)
//   chat_template_values.cc    values with Python semantics: str(), truthiness, ==, <, +, a[i]
//   chat_template_builtins.cc  str/dict methods, tests, filters, globals
//   chat_template_render.cc    AST + context -> text
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

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

// "<origin>: line L:C: ", the prefix of every parse and render error.
inline std::string At(const std::string& origin, int line, int col) {
  return absl::StrCat(origin, ": line ", line, ":", col, ": ");
}

inline bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// The characters (code points) of a UTF-8 string, as Python indexes them.
std::vector<std::string> Chars(const std::string& s);

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

Value Undefined(std::string what);
Value Data(Json j);
// `child`, a node inside parent's data, sharing its storage.
Value Child(const Value& parent, const Json& child);
Value Function(std::function<absl::StatusOr<Value>(const Args&, const Kwargs&)> f);

inline absl::Status Err(std::string msg) { return absl::InvalidArgumentError(std::move(msg)); }
absl::Status UndefinedError(const Value& v);

inline bool IsNone(const Value& v) { return !v.is_data() ? false : v.json().is_null(); }
inline bool Absent(const Value& v) { return v.kind == Value::Kind::kUndefined || IsNone(v); }
inline bool IsStr(const Value& v) { return v.is_data() && v.json().is_string(); }
inline bool IsInt(const Value& v) {
  return v.is_data() && (v.json().is_number_integer() || v.json().is_boolean());
}
inline bool IsNum(const Value& v) {
  return v.is_data() && (v.json().is_number() || v.json().is_boolean());
}
inline int64_t AsInt(const Json& j) {
  return j.is_boolean() ? (j.get<bool>() ? 1 : 0) : j.get<int64_t>();
}
inline double AsFloat(const Json& j) {
  return j.is_boolean() ? (j.get<bool>() ? 1.0 : 0.0) : j.get<double>();
}
inline const std::string& S(const Value& v) { return v.json().get_ref<const std::string&>(); }

// Python's type name: "str", "int", "NoneType", "Undefined", ...
std::string TypeName(const Value& v);
// A value as JSON (a namespace as an object of its attributes; functions and Undefined as null).
Json ToJson(const Value& v);
// Python's str(): what {{ v }} writes.
std::string Str(const Value& v);
// json.dumps(j, ensure_ascii=False, indent=indent) with indent < 0 meaning None.
void JsonDump(const Json& j, int indent, int level, std::string* out);
bool Truthy(const Value& v);
bool Equal(const Value& a, const Value& b);
// Items of a list, keys of a dict, characters of a string; Undefined iterates as empty.
absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
// Python's len().
absl::StatusOr<int64_t> Length(const Value& v);
// a.b: a mapping's key or a namespace's attribute; anything else is undefined.
Value GetAttr(const Value& obj, const std::string& name);
// a[key]: a key, or an index (negative from the end) into a list or string.
Value GetItem(const Value& obj, const Value& key);
// a[start:stop:step] with Python's index rules.
absl::StatusOr<Value> SliceOf(const Value& obj, const Value& start, const Value& stop,
                              const Value& step);
// a op b for + - * / // % ** and ~.
absl::StatusOr<Value> Arith(const std::string& op, const Value& a, const Value& b);
// a op b for == != < <= > >= in, not in.
absl::StatusOr<bool> CompareOp(const std::string& op, const Value& a, const Value& b);

// ------------------------------------------------------------------------------------------
// Builtins

// Whether `obj.name(...)` is a str or dict method CallMethod knows.
bool IsMethod(const Value& obj, const std::string& name);
absl::StatusOr<Value> CallMethod(const Value& obj, const std::string& name, const Args& args,
                                 const Kwargs& kwargs);
// `v is name(args)`.
absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const Args& args);
// `v | name(args, kwargs)`.
absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const Args& args,
                                  const Kwargs& kwargs);
// range, namespace, dict, raise_exception, strftime_now.
std::map<std::string, Value> Globals();

// ------------------------------------------------------------------------------------------
// The stages

// Template text (\r\n and \r already read as \n) -> tokens, the last one kEnd.
// InvalidArgument "<origin>: line L:C: ..." on a lexical error.
absl::StatusOr<std::vector<Token>> Lex(const std::string& src, const std::string& origin);

// Tokens -> the template's statements in *out. InvalidArgument naming the line:column and what
// was expected on a syntax error.
absl::Status ParseTemplate(std::vector<Token> tokens, const std::string& origin, Block* out);

// Renders `body` with the globals and `context` (the variables of the render).
absl::StatusOr<std::string> RenderTemplate(const Block& body, const std::string& origin,
                                           std::map<std::string, Value> context);

}  // namespace chat_template_internal
}  // namespace hap
