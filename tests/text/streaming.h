// Streaming detokenization as the tokenizer tests drive it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/text/streaming_detokenizer.h"
#include "runtime/text/tokenizer.h"

namespace hap::testing {

// What a StreamingDetokenizer releases for `ids` pushed one at a time: the chunk after each id,
// then what Flush gives (ids.size() + 1 chunks).
inline std::vector<std::string> StreamChunks(const Tokenizer& tok,
                                             const std::vector<int32_t>& ids) {
  StreamingDetokenizer stream(tok);
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(stream.Push(id));
  chunks.push_back(stream.Flush());
  return chunks;
}

}  // namespace hap::testing
