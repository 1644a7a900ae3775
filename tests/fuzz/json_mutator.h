// A structure-aware mutator for the targets whose input is JSON (config.json,
// preprocessor_config.json, the sharded index, OpenAI request bodies, safetensors headers).
// Byte mutations alone rarely turn "patch_size": 14 into 0 or a huge value while keeping the
// document valid; this edits one node of the parsed document instead (edge numbers, emptied or
// retyped values, removed or duplicated members, a subtree copied elsewhere) and leaves the
// other half of the mutations to libFuzzer's own byte mutators. A target opts in with
// HAP_FUZZ_JSON_MUTATOR() (or HAP_FUZZ_SAFETENSORS_MUTATOR() for a whole safetensors file).
#pragma once

#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/fuzz/fuzz_util.h"

namespace hap::fuzz {

inline void CollectNodes(nlohmann::json& j, std::vector<nlohmann::json*>& out) {
  out.push_back(&j);
  if (j.is_structured()) {
    for (auto& child : j) CollectNodes(child, out);
  }
}

// Numbers at the edges parsers get wrong: zero, signs, powers of two, int/int64 limits,
// denormals, huge doubles; or the old value doubled, halved or stepped.
inline nlohmann::json EdgeNumber(Rng& rng, const nlohmann::json& old) {
  static const nlohmann::json kEdges[] = {0,
                                          -1,
                                          1,
                                          2,
                                          3,
                                          4096,
                                          4097,
                                          std::numeric_limits<int32_t>::max(),
                                          std::numeric_limits<int32_t>::min(),
                                          int64_t{1} << 31,
                                          std::numeric_limits<int64_t>::max(),
                                          std::numeric_limits<uint64_t>::max(),
                                          std::numeric_limits<int64_t>::min(),
                                          1e308,
                                          -1e308,
                                          5e-324,
                                          0.5,
                                          -0.0};
  const double v = old.is_number() ? old.get<double>() : 1.0;
  const size_t k = Pick(rng, std::size(kEdges) + 3);
  if (k < std::size(kEdges)) return kEdges[k];
  if (k == std::size(kEdges)) return v * 2;
  if (k == std::size(kEdges) + 1) return v / 2;
  // One step up or down, wrapping at the 64-bit limits.
  if (!old.is_number_integer()) return v + 1;
  const uint64_t bits =
      old.is_number_unsigned() ? old.get<uint64_t>() : static_cast<uint64_t>(old.get<int64_t>());
  const uint64_t stepped = Pick(rng, 2) ? bits + 1 : bits - 1;
  if (old.is_number_unsigned()) return stepped;
  return static_cast<int64_t>(stepped);
}

// A value of some type, to put where another type is expected.
inline nlohmann::json OtherType(Rng& rng) {
  static const nlohmann::json kValues[] = {
      nullptr, nlohmann::json::array(), nlohmann::json::object(), "", 0, true, 1.5};
  return kValues[Pick(rng, std::size(kValues))];
}

// Edits one node of `doc` in place.
inline void MutateJsonDoc(nlohmann::json& doc, Rng& rng) {
  std::vector<nlohmann::json*> nodes;
  CollectNodes(doc, nodes);
  nlohmann::json& node = *nodes[Pick(rng, nodes.size())];
  switch (Pick(rng, 4)) {
    case 0:  // a value of another type
      node = OtherType(rng);
      return;
    case 1:  // a copy of another subtree
      node = nlohmann::json(*nodes[Pick(rng, nodes.size())]);
      return;
    default:
      break;
  }
  if (node.is_number()) {
    node = EdgeNumber(rng, node);
  } else if (node.is_boolean()) {
    node = !node.get<bool>();
  } else if (node.is_string()) {
    // Invalid UTF-8 becomes U+FFFD when the document is written.
    node = MutateStringBytes(rng, node.get<std::string>());
  } else if (node.is_object() && !node.empty()) {
    auto it = node.begin();
    std::advance(it, Pick(rng, node.size()));
    if (Pick(rng, 2) == 0) {
      node.erase(it);
    } else {
      node[it.key() + (Pick(rng, 2) ? "_" : "")] = OtherType(rng);
    }
  } else if (node.is_array() && !node.empty()) {
    const size_t i = Pick(rng, node.size());
    switch (Pick(rng, 3)) {
      case 0:
        node.erase(node.begin() + i);
        break;
      case 1:
        node.push_back(nlohmann::json(node[i]));
        break;
      default:
        node.push_back(EdgeNumber(rng, node[i]));
    }
  } else {
    node = EdgeNumber(rng, node);
  }
}

// Mutates `data` as a JSON document half the time (when it parses), else with libFuzzer's byte
// mutators.
inline size_t MutateJsonBytes(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  Rng rng(seed);
  if (Pick(rng, 2) == 0) return LLVMFuzzerMutate(data, size, max_size);
  nlohmann::json doc = nlohmann::json::parse(data, data + size, nullptr, false);
  if (doc.is_discarded()) return LLVMFuzzerMutate(data, size, max_size);
  for (size_t n = 1 + Pick(rng, 3); n > 0; --n) MutateJsonDoc(doc, rng);
  const std::string text = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, text.data(), text.size());
  return text.size();
}

// A safetensors file: its JSON header mutated as above with the 8-byte length kept in step, the
// data section kept, cut or extended now and then.
inline size_t MutateSafetensorsBytes(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  Rng rng(seed);
  uint64_t header_len = 0;
  if (size >= 8) std::memcpy(&header_len, data, 8);
  if (Pick(rng, 2) == 0 || size < 8 || header_len > size - 8) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  nlohmann::json doc = nlohmann::json::parse(data + 8, data + 8 + header_len, nullptr, false);
  if (doc.is_discarded()) return LLVMFuzzerMutate(data, size, max_size);
  for (size_t n = 1 + Pick(rng, 3); n > 0; --n) MutateJsonDoc(doc, rng);
  std::string header = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  header.append(Pick(rng, 8), ' ');
  std::string body(reinterpret_cast<const char*>(data) + 8 + header_len, size - 8 - header_len);
  switch (Pick(rng, 4)) {
    case 0:
      body.resize(Pick(rng, body.size() + 1));
      break;
    case 1:
      body.append(Pick(rng, 64), '\x3f');
      break;
    default:
      break;
  }
  const uint64_t new_len = header.size();
  if (8 + header.size() + body.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, &new_len, 8);
  std::memcpy(data + 8, header.data(), header.size());
  std::memcpy(data + 8 + header.size(), body.data(), body.size());
  return 8 + header.size() + body.size();
}

}  // namespace hap::fuzz

#define HAP_FUZZ_JSON_MUTATOR()                                                          \
  extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, \
                                            unsigned int seed) {                         \
    return hap::fuzz::MutateJsonBytes(data, size, max_size, seed);                       \
  }

#define HAP_FUZZ_SAFETENSORS_MUTATOR()                                                   \
  extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, \
                                            unsigned int seed) {                         \
    return hap::fuzz::MutateSafetensorsBytes(data, size, max_size, seed);                \
  }
