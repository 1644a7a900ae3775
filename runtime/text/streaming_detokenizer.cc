// StreamingDetokenizer: decodes windows of ids between safe split points.
#include "runtime/text/streaming_detokenizer.h"

#include "runtime/text/unicode.h"

namespace hap {

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

  // The trailing run of pieces that decode as raw bytes: the window may be cut only where the
  // run's bytes so far end on a character boundary.
  size_t run_begin = window_.size();
  std::string ignored;
  while (run_begin > 0 && tok_.PieceBytes(window_[run_begin - 1], &ignored)) --run_begin;
  if (run_begin == window_.size()) return Release(window_.size());
  std::string run;
  size_t cut = run_begin;
  for (size_t i = run_begin; i < window_.size(); ++i) {
    tok_.PieceBytes(window_[i], &run);
    if (!unicode::EndsInsideUtf8Sequence(run)) cut = i + 1;
  }
  return Release(cut);
}

std::string StreamingDetokenizer::Flush() {
  std::string text = window_.empty() ? std::string() : DecodeWindow(window_);
  window_.clear();
  started_ = false;
  return text;
}

}  // namespace hap
