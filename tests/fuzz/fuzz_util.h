// Helpers shared by the libFuzzer targets of tests/fuzz: a property check that aborts (libFuzzer
// records the input), the committed files the targets load once, and the message-stream split
// the proto stream targets use.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "tests/common/utf8.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace hap::fuzz {

// The structure-aware mutators' generator, seeded by libFuzzer, and a pick in [0, n).
using Rng = std::minstd_rand;
inline size_t Pick(Rng& rng, size_t n) { return n == 0 ? 0 : rng() % n; }

// A string value edited as the structure-aware mutators do: emptied, doubled, cut, one byte
// inserted, or its bytes run through libFuzzer's byte mutators.
inline std::string MutateStringBytes(Rng& rng, std::string s) {
  switch (Pick(rng, 5)) {
    case 0:
      return "";
    case 1:
      return s + s;
    case 2:
      return s.substr(0, Pick(rng, s.size() + 1));
    case 3:
      s.insert(Pick(rng, s.size() + 1), 1, static_cast<char>(rng()));
      return s;
    default: {
      const size_t size = s.size();
      if (size == 0) return std::string(1, static_cast<char>(rng()));
      s.resize(size + 16);
      s.resize(LLVMFuzzerMutate(reinterpret_cast<uint8_t*>(s.data()), size, s.size()));
      return s;
    }
  }
}

// A broken invariant is a crash: print it and abort so libFuzzer saves the input.
#define HAP_FUZZ_CHECK(cond, ...)                                                   \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, "  " __VA_ARGS__);                                       \
      std::fprintf(stderr, "\n");                                                   \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

// The source tree (HAP_SOURCE_DIR at build time; $HAP_SOURCE_DIR overrides it for a moved tree).
inline std::string SourceDir() {
  if (const char* env = std::getenv("HAP_SOURCE_DIR"); env != nullptr && *env != '\0') return env;
  return HAP_SOURCE_DIR;
}

// With HAP_FUZZ_VERBOSE set, the targets print what they make of each input (for triage and
// for checking that the seeds get past the first checks).
inline bool Verbose() {
  static const bool verbose = std::getenv("HAP_FUZZ_VERBOSE") != nullptr;
  return verbose;
}

inline std::string_view AsView(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The fuzz input as a stream of messages, read as the wire form of
// `message Stream { repeated Msg msg = 1; }`: records of tag 0x0a, a varint length and that many
// bytes. Records of other fields are skipped as protobuf would skip them; the split stops at the
// first malformed record. tests/fuzz/make_corpus.py writes seeds this way.
inline std::vector<std::string_view> SplitStream(const uint8_t* data, size_t size) {
  std::vector<std::string_view> out;
  size_t i = 0;
  auto varint = [&](uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && i < size; shift += 7) {
      const uint8_t b = data[i++];
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  };
  while (i < size) {
    uint64_t tag;
    if (!varint(&tag)) break;
    const uint64_t wire = tag & 7;
    uint64_t len = 0;
    if (wire == 0) {
      if (!varint(&len)) break;
      continue;
    }
    if (wire == 1 || wire == 5) {
      const size_t skip = wire == 1 ? 8 : 4;
      if (size - i < skip) break;
      i += skip;
      continue;
    }
    if (wire != 2 || !varint(&len) || len > size - i) break;
    if ((tag >> 3) == 1) out.push_back(AsView(data + i, static_cast<size_t>(len)));
    i += static_cast<size_t>(len);
  }
  return out;
}

// Kept under hap::fuzz, where the targets call it.
using ::hap::testing::IsValidUtf8;

}  // namespace hap::fuzz
