// Typed reading of the JSON side files of a checkpoint (config.json, preprocessor_config.json):
// errors name the file, the key path and what was expected. Internal to runtime/io.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/file_util.h"
#include "nlohmann/json.hpp"

namespace hap::io_internal {

// The top-level object of a JSON file's text; InvalidArgument "<source>: malformed JSON: ..." or
// "<source>: top level is a JSON <type>, expected an object".
absl::StatusOr<nlohmann::json> ParseJsonObject(std::string_view text, const std::string& source);

// model_dir/config.json read and given to parse(text, path), so that its errors name the file.
template <typename Config>
absl::StatusOr<Config> LoadConfigJson(const std::string& model_dir,
                                      absl::StatusOr<Config> (*parse)(std::string_view,
                                                                      std::string_view)) {
  const std::string path = model_dir + "/config.json";
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  return parse(*text, path);
}

// A value for an error message, cut to 80 characters.
std::string Brief(const nlohmann::json& j);

// A JSON integer that fits an int.
bool ToInt(const nlohmann::json& v, int& out);

// The float as the shortest decimal that reads back to it, so 1e-5f is written as 1e-05 rather
// than the 9.99999974737875e-06 its exact double value would print as.
double ShortestDouble(float f);

// OK when value is one of `supported`; else InvalidArgument
// "<where><name> '<value>' is not supported (supported: a, b)".
absl::Status CheckSupported(const std::string& where, const char* name, const std::string& value,
                            std::initializer_list<const char*> supported);

// Typed access to the keys of one JSON object. Absent and null keys leave the caller's default
// in place (transformers treats an explicit null like an absent key for these fields); present
// keys of the wrong type are errors that name the full key path: "<source>: <prefix><key> ...".
class FieldReader {
 public:
  FieldReader(const nlohmann::json& obj, const std::string& source, const char* prefix);

  bool Has(const char* key) const { return obj_.contains(key) && !obj_[key].is_null(); }
  const nlohmann::json& Get(const char* key) const { return obj_[key]; }

  absl::Status Int(const char* key, int& out) const;
  // Token ids may be a list in newer configs (several EOS ids); the first one is used.
  absl::Status TokenId(const char* key, int& out) const;
  absl::Status Float(const char* key, float& out) const;
  absl::Status Double(const char* key, double& out) const;
  absl::Status String(const char* key, std::string& out) const;
  absl::Status Bool(const char* key, bool& out) const;
  absl::Status StringList(const char* key, std::vector<std::string>& out) const;
  absl::Status IntList(const char* key, std::vector<int>& out) const;

  absl::Status TypeError(const char* key, const nlohmann::json& v, const char* expected) const;

  // model_type and architectures as the file gives them, empty where it has neither: the
  // caller's defaults name the model family, which a file need not repeat.
  absl::Status Architecture(std::string& model_type, std::vector<std::string>& architectures) const;

  // "<source>: <prefix>", the start of every message.
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& obj_;
  std::string where_;
};

}  // namespace hap::io_internal
