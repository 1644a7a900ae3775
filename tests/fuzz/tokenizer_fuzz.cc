// Fuzzes the tokenizers (runtime/text: tokenizer.cc, hf_tokenizer.cc, bpe_model.cc,
// pretokenize_regex.cc, unicode.cc, streaming_detokenizer.cc) with the default model's
// tokenizer.model and tokenizer.json. The first byte picks the mode and the format: encode the
// rest as text, or read it as ids (2 bytes each, mostly inside the vocabulary, some outside it:
// negative, the image and pad ids, INT32 extremes). Valid UTF-8 text must get the same ids from
// both formats. The ids stream through a StreamingDetokenizer, which must release valid UTF-8
// only and, with Flush, exactly what Decode gives for all the ids at once (for tokenizer.json
// ids read from bytes, whose <0xNN> runs may be invalid, only the first holds: see
// streaming_detokenizer.h).
#include <climits>
#include <memory>
#include <string>
#include <vector>

#include "runtime/text/streaming_detokenizer.h"
#include "runtime/text/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const hap::Tokenizer* Load(const char* name) {
  auto t = hap::Tokenizer::Load(hap::fuzz::SourceDir() + "/models/scenes-llava/" + name);
  HAP_FUZZ_CHECK(t.ok(), "%s", t.status().ToString().c_str());
  return t->release();
}

const hap::Tokenizer& Tok() {
  static const hap::Tokenizer* tok = Load("tokenizer.model");
  return *tok;
}

const hap::Tokenizer& JsonTok() {
  static const hap::Tokenizer* tok = Load("tokenizer.json");
  return *tok;
}

int32_t IdFrom(uint16_t u, int vocab) {
  switch (u) {
    case 0xffff:
      return INT32_MIN;
    case 0xfffe:
      return INT32_MAX;
    case 0xfffd:
      return -1;
    case 0xfffc:
      return vocab;  // the first id past the SentencePiece vocabulary
    case 0xfffb:
      return 32000;  // llava-hf's image token
    default:
      return static_cast<int32_t>(u % (vocab + 2)) - 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Tok();
  JsonTok();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool json = data[0] & 2;
  const hap::Tokenizer& tok = json ? JsonTok() : Tok();
  const int vocab = tok.vocab_size();
  const bool encode = data[0] % 2 == 0;
  std::vector<int32_t> ids;
  if (encode) {
    const std::string_view text = hap::fuzz::AsView(data + 1, size - 1);
    ids = tok.Encode(text);
    for (int32_t id : ids) {
      HAP_FUZZ_CHECK(id >= 0 && id < vocab, "Encode gave id %d outside [0, %d)", id, vocab);
    }
    if (json && hap::fuzz::IsValidUtf8(text)) {
      HAP_FUZZ_CHECK(ids == Tok().Encode(text), "tokenizer.json and tokenizer.model ids differ");
    }
    if (json) {
      for (int32_t id : tok.Encode(text, hap::Tokenizer::SpecialTokens::kRecognized)) {
        HAP_FUZZ_CHECK(id >= 0 && id < vocab, "Encode gave id %d outside [0, %d)", id, vocab);
      }
    }
  } else {
    for (size_t i = 1; i + 1 < size; i += 2) {
      ids.push_back(IdFrom(static_cast<uint16_t>(data[i] | data[i + 1] << 8), vocab));
    }
  }
  const std::string whole = tok.Decode(ids);
  for (int32_t id : ids) tok.IdToPiece(id);

  hap::StreamingDetokenizer detok(tok);
  for (int round = 0; round < 2; ++round) {  // Flush resets: the second stream is the same
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = detok.Push(id);
      HAP_FUZZ_CHECK(hap::fuzz::IsValidUtf8(piece), "Push(%d) released invalid UTF-8", id);
      streamed += piece;
    }
    streamed += detok.Flush();
    if (json && !encode) continue;
    HAP_FUZZ_CHECK(streamed == whole, "streamed '%s' != decoded '%s' (%zu ids, round %d)",
                   streamed.c_str(), whole.c_str(), ids.size(), round);
  }
  return 0;
}
