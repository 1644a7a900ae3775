// One whole request in process: image → encode → prompt → prefill (pruned as asked) → decode.
// `hapctl run` uses it; the services run the same stages split across processes.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "runtime/model/generate.h"
#include "runtime/model/llama.h"
#include "runtime/model/llava_model.h"

namespace hap {

struct GenerateRequest {
  std::string image_bytes;  // JPEG or PNG
  std::string prompt;       // the question; the llava template is applied
  SamplingParams sampling;
  StopCriteria stop;
};

struct StageTimings {
  double preprocess_ms = 0;
  double encode_ms = 0;  // vision tower + projector
  double prefill_ms = 0;
  double ttft_ms = 0;    // request start → first token sampled
  double decode_ms = 0;
  double total_ms = 0;
  double prefill_tokens_per_s = 0;
  double decode_tokens_per_s = 0;  // tokens after the first / decode time
};

struct GenerateResult {
  DecodeResult decode;
  StageTimings timings;
  int prompt_tokens = 0;  // unpruned, visual tokens included
  int visual_tokens = 0;  // visual tokens entering the decoder
  PrefillTrace trace;
  int64_t kv_bytes = 0;
};

absl::StatusOr<GenerateResult> Generate(const LlavaModel& model, const GenerateRequest& request,
                                        const TokenSink& sink);

}  // namespace hap
