// ExportedKv as JSON, for the KV handover test and its child process (tests/model/
// kv_handover_test.cc): the handles hex-encoded.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/model/kv_cache.h"

namespace hap::testing {

inline std::string Hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

inline std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

inline nlohmann::json ExportedKvJson(const ExportedKv& e) {
  nlohmann::json layers = nlohmann::json::array();
  for (const ExportedKv::Layer& l : e.layers) {
    layers.push_back(
        {{"k", Hex(l.k)}, {"v", Hex(l.v)}, {"capacity", l.capacity}, {"positions", l.positions}});
  }
  return {{"device", e.device},
          {"dtype", std::string(DTypeName(e.dtype))},
          {"kv_dim", e.kv_dim},
          {"layers", layers}};
}

inline ExportedKv ExportedKvFromJson(const nlohmann::json& j) {
  ExportedKv e;
  e.device = j.at("device").get<std::string>();
  e.dtype = j.at("dtype").get<std::string>() == "BF16" ? DType::kBF16 : DType::kF32;
  e.kv_dim = j.at("kv_dim").get<int>();
  for (const nlohmann::json& l : j.at("layers")) {
    ExportedKv::Layer layer;
    layer.k = Unhex(l.at("k").get<std::string>());
    layer.v = Unhex(l.at("v").get<std::string>());
    layer.capacity = l.at("capacity").get<int>();
    layer.positions = l.at("positions").get<std::vector<int32_t>>();
    e.layers.push_back(std::move(layer));
  }
  return e;
}

}  // namespace hap::testing
