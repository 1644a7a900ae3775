// Incremental detokenisation for token streaming: text is released as soon as it is final.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/text/tokenizer.h"

namespace hap {

// Guarantees, for any id sequence pushed:
//  * Push(...) + ... + Flush() == tok.Decode(all ids), byte for byte. One exception, for
//    tokenizer.json's ByteFallback decoder only: it turns a whole run of <0xNN> pieces into
//    U+FFFD per byte when any of it is invalid, so a run whose valid start was already released
//    and which turns invalid later streams that start as text;
//  * no returned string ends inside a UTF-8 sequence: a character split over byte pieces
//    (<0xE2><0x82><0xAC>, or byte-level BPE pieces) is held until it is complete;
//  * the first piece's leading space is removed exactly as Decode removes it.
// Not thread-safe; one per stream. The Tokenizer must outlive it.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tok);

  // Text that became final with `id`; often "" (held bytes, BOS/EOS, out-of-vocabulary ids).
  std::string Push(int32_t id);
  // Everything still held (an unfinished UTF-8 sequence decodes to U+FFFD, as in Decode);
  // resets the detokenizer for a new stream.
  std::string Flush();

 private:
  // Decodes and releases window_[0, cut) if that yields final text.
  std::string Release(size_t cut);
  std::string DecodeWindow(const std::vector<int>& ids) const;

  const Tokenizer& tok_;
  // Ids not yet released. Splitting the stream only where no byte run is cut keeps
  // SentencePiece's per-run byte decoding identical to decoding everything at once.
  std::vector<int> window_;
  // Whether released text is non-empty; until then Decode's leading-space rule still applies,
  // so the window is decoded as a stream start rather than as a continuation.
  bool started_ = false;
};

}  // namespace hap
