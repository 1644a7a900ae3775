// LLaVA's evaluation files for `hapctl eval --question-file`: the question JSONL that LLaVA's
// model_vqa_loader.py reads and the answer JSONL it writes, so that the benchmarks' own scoring
// scripts (GQA, MME, POPE, TextVQA, ...) read what hapctl writes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/model/generate.h"
#include "runtime/model/pipeline.h"

namespace hap::cli {

struct LlavaQuestion {
  nlohmann::ordered_json question_id;  // a string or an integer; written back with its JSON type
  std::string image;                   // file name relative to the image folder
  std::string text;                    // the prompt exactly as the file carries it
  std::string category;                // optional ("" when absent)
  int line = 0;                        // 1-based line in the question file, for error messages
};

// Reads a question file (one JSON object per line; blank lines skipped) and checks that every
// image exists under `image_folder`. Errors are InvalidArgument "FILE:LINE: ..." naming the
// field (missing, wrong type) or NotFound "FILE:LINE: image ... not found" for a missing image.
absl::StatusOr<std::vector<LlavaQuestion>> ReadLlavaQuestions(const std::string& path,
                                                              const std::string& image_folder);

// LLaVA's --num-chunks/--chunk-idx split (model_vqa_loader.py get_chunk): chunks of
// ceil(n / num_chunks) questions in file order; chunk `chunk_idx` of them (maybe empty).
absl::StatusOr<std::vector<LlavaQuestion>> TakeChunk(std::vector<LlavaQuestion> questions,
                                                     int num_chunks, int chunk_idx);

// How a question's text becomes the prompt.
//  - "llava_hf" (default): the project's llava-hf template, "USER: <image>\n{text} ASSISTANT:".
//  - "vicuna_v1" (alias "llava_v1"): LLaVA-1.5's conv template as model_vqa_loader.py renders
//    it, the same with the Vicuna system prompt and a space before "USER:".
enum class ConvMode { kLlavaHf, kVicunaV1 };
absl::StatusOr<ConvMode> ParseConvMode(const std::string& name);
const char* ConvModeName(ConvMode mode);
// The whole vicuna_v1 prompt with its one "<image>" (for PromptText::Rendered).
std::string RenderVicunaV1(const std::string& text);

// The answers file for `method`: every "{method}" in `pattern` replaced by the method's name.
std::string AnswersPathFor(const std::string& pattern, const std::string& method);

// A 22-character id in shortuuid's alphabet (what LLaVA's answer_id looks like), derived from
// `key` by 128-bit FNV-1a: the same key gives the same id, so a rerun writes the same file.
std::string AnswerId(std::string_view key);

// The last component of a model directory ("models/scenes-llava/" → "scenes-llava"): LLaVA's
// model_id.
std::string ModelIdOf(const std::string& model_dir);

// What produced one answer, for the answer line's metadata.
struct AnswerRun {
  const PruneRequest* prune = nullptr;  // the method and budget asked for
  ConvMode conv = ConvMode::kLlavaHf;
  const PrefillStats* stats = nullptr;
  const DecodeResult* decode = nullptr;
  double elapsed_ms = 0;  // this answer: image encode (unless reused), prefill and decode
};

// One answer line, keys in model_vqa_loader.py's order: question_id, prompt (the question's
// text), text (the answer, surrounding whitespace stripped), answer_id, model_id, metadata.
nlohmann::ordered_json AnswerLine(const LlavaQuestion& q, const std::string& answer_id,
                                  const std::string& model_id, const AnswerRun& run);

}  // namespace hap::cli
