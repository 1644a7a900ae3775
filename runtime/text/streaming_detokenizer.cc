// StreamingDetokenizer: decodes windows of ids between safe split points.
#include "runtime/text/streaming_detokenizer.h"

namespace hap {

namespace {

// Number of bytes a UTF-8 sequence starting with `lead` has; 1 for bytes that cannot start one
// (SentencePiece turns each of those into its own U+FFFD).
int Utf8Length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 1;
}

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// Whether `bytes` ends in a prefix of a UTF-8 sequence that more continuation bytes could
// complete; such a tail must be held back.
bool EndsIncomplete(const std::vector<uint8_t>& bytes) {
  const size_t n = bytes.size();
  // A lead byte is at most 3 positions before the end of an unfinished sequence.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const uint8_t b = bytes[n - back];
    if (IsContinuation(b)) continue;
    return Utf8Length(b) > static_cast<int>(back);
  }
  return false;
}

}  // namespace

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tok) : tok_(tok) {}

std::string StreamingDetokenizer::DecodeWindow(const std::vector<int>& ids) const {
  return started_ ? tok_.DecodeContinuation(ids) : tok_.DecodeInVocab(ids);
}

std::string StreamingDetokenizer::Release(size_t cut) {
  if (cut == 0) return {};
  const std::vector<int> head(window_.begin(), window_.begin() + cut);
  std::string text = DecodeWindow(head);
  // Before any text exists, an empty decoding (BOS, or a lone '▁' whose space Decode strips)
  // does not settle which piece is "first", so keep those ids for the next decode.
  if (!started_ && text.empty()) return {};
  started_ = true;
  window_.erase(window_.begin(), window_.begin() + cut);
  return text;
}

std::string StreamingDetokenizer::Push(int32_t id) {
  // Out-of-vocabulary ids (image/pad) decode to nothing and, like in Decode, do not split a
  // byte run around them.
  if (!tok_.InVocab(id)) return {};
  window_.push_back(id);

  size_t run_begin = window_.size();
  while (run_begin > 0 && tok_.IsBytePiece(window_[run_begin - 1])) --run_begin;
  std::vector<uint8_t> run;
  for (size_t i = run_begin; i < window_.size(); ++i) run.push_back(tok_.ByteValue(window_[i]));
  // Release everything, or everything before an unfinished byte run.
  return Release(EndsIncomplete(run) ? run_begin : window_.size());
}

std::string StreamingDetokenizer::Flush() {
  std::string text = window_.empty() ? std::string() : DecodeWindow(window_);
  window_.clear();
  started_ = false;
  return text;
}

}  // namespace hap
