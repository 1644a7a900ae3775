// Where hapctl and the services find the default model when --model is not given.
#pragma once

#include <string>

namespace hap {

// Name of the default model directory under models/.
inline constexpr char kDefaultModelName[] = "scenes-llava";

// --model if given; else $HAP_MODEL_DIR; else <prefix>/share/hap/models/<default> beside an
// installed binary when it exists; else <source tree>/models/<default>.
std::string ResolveModelDir(const std::string& flag_value);

// The text make-tiny trains its tokenizer on: <prefix>/share/hap/tokenizer/corpus.txt beside an
// installed binary when it exists, else the source tree's data/tokenizer/corpus.txt.
std::string TokenizerCorpusPath();

}  // namespace hap
