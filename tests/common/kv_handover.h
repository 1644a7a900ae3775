// For the tests of a KV cache handed to another process (tests/model/kv_handover_test.cc,
// tests/e2e/kv_handover_wire_test.cc) and their child processes: ExportedKv as JSON (the handles
// hex-encoded), and a cache's rows as bytes to compare across the processes.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "runtime/model/kv_cache.h"

namespace hap::testing {

inline nlohmann::json ExportedKvJson(const ExportedKv& e) {
  nlohmann::json layers = nlohmann::json::array();
  for (const ExportedKv::Layer& l : e.layers) {
    layers.push_back({{"k", absl::BytesToHexString(l.k)},
                      {"v", absl::BytesToHexString(l.v)},
                      {"capacity", l.capacity},
                      {"positions", l.positions}});
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
    layer.k = absl::HexStringToBytes(l.at("k").get<std::string>());
    layer.v = absl::HexStringToBytes(l.at("v").get<std::string>());
    layer.capacity = l.at("capacity").get<int>();
    layer.positions = l.at("positions").get<std::vector<int32_t>>();
    e.layers.push_back(std::move(layer));
  }
  return e;
}

// Every layer of `kv` as read back (KvStore::ReadRows): its row count (int32), position ids
// (int32 each), then K and V as stored.
inline absl::StatusOr<std::string> LayerRowsBytes(const KvStore& kv) {
  std::string out;
  for (int l = 0; l < kv.n_layers(); ++l) {
    const int32_t n = kv.len(l);
    std::vector<int32_t> positions(n);
    std::string k(n * kv.row_bytes(), '\0'), v(k.size(), '\0');
    HAP_RETURN_IF_ERROR(kv.ReadRows(l, 0, n, k.data(), v.data(), positions.data()));
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    out.append(reinterpret_cast<const char*>(positions.data()), sizeof(int32_t) * n);
    out += k;
    out += v;
  }
  return out;
}

}  // namespace hap::testing
