// The chat-template builtins: methods of str and dict values, tests (`x is name(args)`),
// filters (`x | name(args)`) and the globals (range, namespace, dict, raise_exception,
// strftime_now).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <iterator>
#include <map>
#include <memory>
#include <string>
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

// ------------------------------------------------------------------------------------------
// Strings: Python's str methods over code points (Unicode whitespace and full case mappings).

std::string Upper(const std::string& s) {
  return unicode::EncodeUtf8(unicode::PyUpper(unicode::DecodeUtf8(s)));
}
std::string Lower(const std::string& s) {
  return unicode::EncodeUtf8(unicode::PyLower(unicode::DecodeUtf8(s)));
}
std::string Capitalize(const std::string& s) {
  return unicode::EncodeUtf8(unicode::PyCapitalize(unicode::DecodeUtf8(s)));
}
// str.title().
std::string PyTitle(const std::string& s) {
  return unicode::EncodeUtf8(unicode::PyTitle(unicode::DecodeUtf8(s)));
}

// Jinja's |title: the text cut before and after runs of whitespace and -({[<, each piece's
// first character upper-cased and the rest lowered.
std::string JinjaTitle(const std::string& s) {
  const std::u32string text = unicode::DecodeUtf8(s);
  auto is_break = [](char32_t c) {
    return unicode::IsPythonSpace(c) || c == U'-' || c == U'(' || c == U'{' || c == U'[' ||
           c == U'<';
  };
  std::u32string out;
  for (size_t i = 0; i < text.size();) {
    size_t j = i;
    const bool breaks = is_break(text[i]);
    while (j < text.size() && is_break(text[j]) == breaks) ++j;
    const std::u32string_view piece(text.data() + i, j - i);
    if (breaks) {
      out += piece;
    } else {
      out += unicode::PyUpper(piece.substr(0, 1));
      out += unicode::PyLower(piece.substr(1));
    }
    i = j;
  }
  return unicode::EncodeUtf8(out);
}

// str.strip/lstrip/rstrip: Python whitespace, or the code points of `chars`.
std::string Strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::u32string text = unicode::DecodeUtf8(s);
  const std::u32string set = Absent(chars) ? std::u32string() : unicode::DecodeUtf8(Str(chars));
  auto strip = [&](char32_t c) {
    return Absent(chars) ? unicode::IsPythonSpace(c) : set.find(c) != std::u32string::npos;
  };
  size_t b = 0, e = text.size();
  while (left && b < e && strip(text[b])) ++b;
  while (right && e > b && strip(text[e - 1])) --e;
  return unicode::EncodeUtf8(std::u32string_view(text).substr(b, e - b));
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
  if (Absent(sep)) {  // runs of Python whitespace; no empty strings
    const std::u32string text = unicode::DecodeUtf8(s);
    size_t i = 0;
    while (i < text.size() && unicode::IsPythonSpace(text[i])) ++i;
    while (i < text.size()) {
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(
            Strip(unicode::EncodeUtf8(std::u32string_view(text).substr(i)), Value(), false, true));
        break;
      }
      size_t e = i;
      while (e < text.size() && !unicode::IsPythonSpace(text[e])) ++e;
      out.push_back(unicode::EncodeUtf8(std::u32string_view(text).substr(i, e - i)));
      i = e;
      while (i < text.size() && unicode::IsPythonSpace(text[i])) ++i;
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
// Helpers of the filters

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

}  // namespace

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
                : name == "title" ? PyTitle(s)
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
// Tests (`x is name(args)`)

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

// ------------------------------------------------------------------------------------------
// Filters (`x | name(args)`)

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
                                       : JinjaTitle(s));
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
  // Jinja's select/reject/map start with `if value:`, so a falsy value (None, undefined, empty)
  // gives an empty result instead of "not iterable".
  const bool guarded = name == "select" || name == "reject" || name == "selectattr" ||
                       name == "rejectattr" || name == "map";
  if (guarded && !Truthy(v)) return Data(Json::array());
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

}  // namespace chat_template_internal
}  // namespace hap
