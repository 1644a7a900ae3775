// A structure-aware mutator for the targets whose input is protobuf (libprotobuf-mutator is not
// in Debian): half the time one field of the parsed message is edited through reflection (edge
// integers, emptied or byte-mutated strings, unknown enum values, repeated fields grown or cut,
// a oneof switched by setting another member, a field cleared), the other half libFuzzer's own
// byte mutators run. Stream inputs (a flags byte, then the records of fuzz_util.h SplitStream)
// get the same per message, plus whole messages dropped, repeated or swapped.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/stubs/common.h"
#include "tests/fuzz/fuzz_util.h"

namespace hap::fuzz {

namespace proto_internal {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Integers at the edges parsers and size checks get wrong, or one step from the old value.
inline int64_t EdgeInt(Rng& rng, int64_t old) {
  static constexpr int64_t kEdges[] = {0,
                                       -1,
                                       1,
                                       2,
                                       64,
                                       256,
                                       1 << 20,
                                       (1 << 20) + 1,
                                       std::numeric_limits<int32_t>::max(),
                                       std::numeric_limits<int32_t>::min(),
                                       std::numeric_limits<int64_t>::max()};
  const size_t k = Pick(rng, std::size(kEdges) + 3);
  if (k < std::size(kEdges)) return kEdges[k];
  if (k == std::size(kEdges)) return static_cast<int64_t>(static_cast<uint64_t>(old) + 1);
  if (k == std::size(kEdges) + 1) return static_cast<int64_t>(static_cast<uint64_t>(old) - 1);
  return static_cast<int64_t>(rng() % 1024);
}

// Zeros, signs, NaN, infinity, the smallest denormal, a huge value, or the old value doubled or
// halved.
inline double EdgeDouble(Rng& rng, double old) {
  static constexpr double kEdges[] = {0,
                                      -0.0,
                                      1,
                                      -1,
                                      std::numeric_limits<double>::quiet_NaN(),
                                      std::numeric_limits<double>::infinity(),
                                      std::numeric_limits<double>::denorm_min(),
                                      1e30};
  const size_t k = Pick(rng, std::size(kEdges) + 2);
  if (k < std::size(kEdges)) return kEdges[k];
  return k == std::size(kEdges) ? old * 2 : old / 2;
}

// A double as a float without the undefined behaviour of an out-of-range conversion.
inline float ToFloat(double d) {
  if (std::isfinite(d) && std::fabs(d) > std::numeric_limits<float>::max()) {
    const float inf = std::numeric_limits<float>::infinity();
    return d > 0 ? inf : -inf;
  }
  return static_cast<float>(d);
}

// A proto3 `string` must stay UTF-8 (the parser refuses anything else), `bytes` need not.
inline std::string MutateString(Rng& rng, std::string s, FieldDescriptor::Type type) {
  std::string out = MutateStringBytes(rng, std::move(s));
  if (type == FieldDescriptor::TYPE_STRING && !IsValidUtf8(out)) {
    for (char& c : out) c &= 0x7f;
  }
  return out;
}

// Sets a singular field, or element `i` of a repeated one (i < 0: appends), to a new value.
inline void SetField(Message& m, const FieldDescriptor* f, int i, Rng& rng) {
  const Reflection* r = m.GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
#define HAP_FUZZ_SET(CPPTYPE, Type, Cast, Value)                                                   \
  case FieldDescriptor::CPPTYPE: {                                                                 \
    const auto old = rep ? (i >= 0 ? r->GetRepeated##Type(m, f, i) : Cast{}) : r->Get##Type(m, f); \
    const Cast value = static_cast<Cast>(Value);                                                   \
    if (!rep)                                                                                      \
      r->Set##Type(&m, f, value);                                                                  \
    else if (i >= 0)                                                                               \
      r->SetRepeated##Type(&m, f, i, value);                                                       \
    else                                                                                           \
      r->Add##Type(&m, f, value);                                                                  \
    break;                                                                                         \
  }
    HAP_FUZZ_SET(CPPTYPE_INT32, Int32, int32_t, EdgeInt(rng, old))
    HAP_FUZZ_SET(CPPTYPE_INT64, Int64, int64_t, EdgeInt(rng, old))
    HAP_FUZZ_SET(CPPTYPE_UINT32, UInt32, uint32_t, EdgeInt(rng, old))
    HAP_FUZZ_SET(CPPTYPE_UINT64, UInt64, uint64_t, EdgeInt(rng, static_cast<int64_t>(old)))
    HAP_FUZZ_SET(CPPTYPE_DOUBLE, Double, double, EdgeDouble(rng, old))
    HAP_FUZZ_SET(CPPTYPE_FLOAT, Float, float, ToFloat(EdgeDouble(rng, old)))
    HAP_FUZZ_SET(CPPTYPE_BOOL, Bool, bool, !old)
    HAP_FUZZ_SET(CPPTYPE_ENUM, EnumValue, int, Pick(rng, 2) ? EdgeInt(rng, old) : Pick(rng, 4))
    HAP_FUZZ_SET(CPPTYPE_STRING, String, std::string, MutateString(rng, old, f->type()))
#undef HAP_FUZZ_SET
    case FieldDescriptor::CPPTYPE_MESSAGE:
      if (!rep) {
        r->MutableMessage(&m, f);  // present (possibly empty): switches a oneof to it
      } else if (i < 0) {
        r->AddMessage(&m, f);
      }
      break;
  }
}

// Every (message, field) pair of the tree, so nested fields are as likely as top-level ones.
inline void CollectFields(Message& m,
                          std::vector<std::pair<Message*, const FieldDescriptor*>>& out) {
  const auto* d = m.GetDescriptor();
  const Reflection* r = m.GetReflection();
  for (int k = 0; k < d->field_count(); ++k) {
    const FieldDescriptor* f = d->field(k);
    out.emplace_back(&m, f);
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (f->is_repeated()) {
      for (int i = 0; i < r->FieldSize(m, f); ++i) {
        CollectFields(*r->MutableRepeatedMessage(&m, f, i), out);
      }
    } else if (r->HasField(m, f)) {
      CollectFields(*r->MutableMessage(&m, f), out);
    }
  }
}

inline void MutateMessage(Message& root, Rng& rng) {
  std::vector<std::pair<Message*, const FieldDescriptor*>> fields;
  CollectFields(root, fields);
  if (fields.empty()) return;
  auto [m, f] = fields[Pick(rng, fields.size())];
  const Reflection* r = m->GetReflection();
  if (Pick(rng, 8) == 0) {
    r->ClearField(m, f);
    return;
  }
  if (!f->is_repeated()) {
    SetField(*m, f, 0, rng);
    return;
  }
  const int n = r->FieldSize(*m, f);
  switch (Pick(rng, 4)) {
    case 0:
      if (n > 0) r->RemoveLast(m, f);
      break;
    case 1:
      SetField(*m, f, -1, rng);
      break;
    default:
      SetField(*m, f, n > 0 ? static_cast<int>(Pick(rng, n)) : -1, rng);
  }
}

}  // namespace proto_internal

// One message of type M.
template <typename M>
size_t MutateProtoBytes(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  Rng rng(seed);
  M message;
  if (Pick(rng, 2) == 0 || !message.ParseFromArray(data, static_cast<int>(size))) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  for (size_t n = 1 + Pick(rng, 3); n > 0; --n) {
    proto_internal::MutateMessage(message, rng);
  }
  const std::string out = message.SerializeAsString();
  if (out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

// A flags byte and a stream of M records.
template <typename M>
size_t MutateProtoStream(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  Rng rng(seed);
  if (size == 0 || Pick(rng, 2) == 0) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  std::vector<std::string> records;
  for (std::string_view r : SplitStream(data + 1, size - 1)) records.emplace_back(r);
  if (records.empty()) return LLVMFuzzerMutate(data, size, max_size);
  const size_t i = Pick(rng, records.size());
  switch (Pick(rng, 6)) {
    case 0:
      records.erase(records.begin() + i);
      break;
    case 1:
      records.insert(records.begin() + i, records[i]);
      break;
    case 2:
      std::swap(records[i], records[Pick(rng, records.size())]);
      break;
    default: {
      M message;
      if (!message.ParseFromString(records[i])) return LLVMFuzzerMutate(data, size, max_size);
      proto_internal::MutateMessage(message, rng);
      records[i] = message.SerializeAsString();
    }
  }
  std::string out(1, static_cast<char>(data[0]));
  for (const std::string& r : records) {
    out.push_back('\x0a');
    for (uint64_t n = r.size();; n >>= 7) {
      out.push_back(static_cast<char>((n & 0x7f) | (n >= 0x80 ? 0x80 : 0)));
      if (n < 0x80) break;
    }
    out += r;
  }
  if (out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

}  // namespace hap::fuzz

// The parser's complaints (invalid UTF-8 in a string field, ...) would flood the fuzzer's log:
// non-fatal protobuf messages are dropped while a LogSilencer lives, i.e. for the whole run.
#define HAP_FUZZ_QUIET_PROTOBUF()                                           \
  static const google::protobuf::LogSilencer* const hap_fuzz_log_silencer = \
      new google::protobuf::LogSilencer;

#define HAP_FUZZ_PROTO_MUTATOR(M)                                                        \
  HAP_FUZZ_QUIET_PROTOBUF()                                                              \
  extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, \
                                            unsigned int seed) {                         \
    return hap::fuzz::MutateProtoBytes<M>(data, size, max_size, seed);                   \
  }

#define HAP_FUZZ_PROTO_STREAM_MUTATOR(M)                                                 \
  HAP_FUZZ_QUIET_PROTOBUF()                                                              \
  extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, \
                                            unsigned int seed) {                         \
    return hap::fuzz::MutateProtoStream<M>(data, size, max_size, seed);                  \
  }
