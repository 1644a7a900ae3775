// The chat-template renderer's values with Python's semantics: str() and repr(), truthiness,
// equality and ordering, len(), iteration, attributes, items and slices, arithmetic.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/text/chat_template_internal.h"

namespace hap {
namespace chat_template_internal {
namespace {

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

int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

}  // namespace

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

absl::Status UndefinedError(const Value& v) {
  return Err(v.what.empty() ? "value is undefined" : v.what);
}

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

}  // namespace chat_template_internal
}  // namespace hap
