// FieldReader and the number helpers shared by the config readers and writers.
#include "runtime/io/json_fields.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace hap::io_internal {

using Json = nlohmann::json;

absl::StatusOr<nlohmann::json> ParseJsonObject(std::string_view text, const std::string& source) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": malformed JSON: ", e.what()));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": top level is a JSON ", root.type_name(), ", expected an object"));
  }
  return root;
}

std::string Brief(const Json& j) {
  std::string s = j.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

bool ToInt(const Json& v, int& out) {
  if (!v.is_number_integer()) return false;
  const bool fits = v.is_number_unsigned()
                        ? v.get<uint64_t>() <= uint64_t{std::numeric_limits<int>::max()}
                        : v.get<int64_t>() >= std::numeric_limits<int>::min() &&
                              v.get<int64_t>() <= std::numeric_limits<int>::max();
  if (fits) out = static_cast<int>(v.get<int64_t>());
  return fits;
}

double ShortestDouble(float f) {
  char buf[32];
  for (int precision = 6; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) break;
  }
  return std::strtod(buf, nullptr);
}

absl::Status CheckSupported(const std::string& where, const char* name, const std::string& value,
                            std::initializer_list<const char*> supported) {
  for (const char* s : supported) {
    if (value == s) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, name, " '", value,
                   "' is not supported (supported: ", absl::StrJoin(supported, ", "), ")"));
}

FieldReader::FieldReader(const Json& obj, const std::string& source, const char* prefix)
    : obj_(obj), where_(absl::StrCat(source, ": ", prefix)) {}

absl::Status FieldReader::Int(const char* key, int& out) const {
  if (!Has(key)) return absl::OkStatus();
  const Json& v = obj_[key];
  if (!v.is_number_integer()) return TypeError(key, v, "an integer");
  if (!ToInt(v, out)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where_, key, " = ", Brief(v), " is out of range"));
  }
  return absl::OkStatus();
}

absl::Status FieldReader::TokenId(const char* key, int& out) const {
  if (Has(key) && obj_[key].is_array()) {
    const Json& list = obj_[key];
    if (list.empty() || !ToInt(list[0], out)) {
      return TypeError(key, list, "an integer or a non-empty list of integers");
    }
    return absl::OkStatus();
  }
  return Int(key, out);
}

absl::Status FieldReader::Float(const char* key, float& out) const {
  if (!Has(key)) return absl::OkStatus();
  const Json& v = obj_[key];
  if (!v.is_number()) return TypeError(key, v, "a number");
  const float f = static_cast<float>(v.get<double>());
  if (!std::isfinite(f)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where_, key, " = ", Brief(v), " is out of range for a float"));
  }
  out = f;
  return absl::OkStatus();
}

absl::Status FieldReader::Double(const char* key, double& out) const {
  if (!Has(key)) return absl::OkStatus();
  const Json& v = obj_[key];
  if (!v.is_number()) return TypeError(key, v, "a number");
  if (!std::isfinite(v.get<double>())) {
    return absl::InvalidArgumentError(absl::StrCat(where_, key, " = ", Brief(v), " is not finite"));
  }
  out = v.get<double>();
  return absl::OkStatus();
}

absl::Status FieldReader::String(const char* key, std::string& out) const {
  if (!Has(key)) return absl::OkStatus();
  const Json& v = obj_[key];
  if (!v.is_string()) return TypeError(key, v, "a string");
  out = v.get<std::string>();
  return absl::OkStatus();
}

absl::Status FieldReader::Bool(const char* key, bool& out) const {
  if (!Has(key)) return absl::OkStatus();
  const Json& v = obj_[key];
  if (!v.is_boolean()) return TypeError(key, v, "true or false");
  out = v.get<bool>();
  return absl::OkStatus();
}

absl::Status FieldReader::IntList(const char* key, std::vector<int>& out) const {
  if (!Has(key)) return absl::OkStatus();
  const Json& v = obj_[key];
  if (!v.is_array()) return TypeError(key, v, "a list of integers");
  std::vector<int> values(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer() || !ToInt(v[i], values[i])) {
      return TypeError(key, v, "a list of integers");
    }
  }
  out = std::move(values);
  return absl::OkStatus();
}

absl::Status FieldReader::StringList(const char* key, std::vector<std::string>& out) const {
  if (!Has(key)) return absl::OkStatus();
  const Json& v = obj_[key];
  if (!v.is_array()) return TypeError(key, v, "a list of strings");
  std::vector<std::string> list;
  for (const Json& e : v) {
    if (!e.is_string()) return TypeError(key, v, "a list of strings");
    list.push_back(e.get<std::string>());
  }
  out = std::move(list);
  return absl::OkStatus();
}

absl::Status FieldReader::Architecture(std::string& model_type,
                                       std::vector<std::string>& architectures) const {
  model_type.clear();
  architectures.clear();
  if (absl::Status s = String("model_type", model_type); !s.ok()) return s;
  return StringList("architectures", architectures);
}

absl::Status FieldReader::TypeError(const char* key, const Json& v, const char* expected) const {
  return absl::InvalidArgumentError(absl::StrCat(where_, key, " is a JSON ", v.type_name(), " (",
                                                 Brief(v), "), expected ", expected));
}

}  // namespace hap::io_internal
