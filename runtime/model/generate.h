// The decode loop shared by `hapctl run` and the decode service: sample, stream text deltas
// (UTF-8 safe, stop strings held back until decided), stop at EOS, a stop string or max tokens.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/sampler.h"

namespace hap {

class LlavaModel;

enum class FinishReason { kEos, kStop, kLength, kCancelled };
std::string_view FinishReasonName(FinishReason reason);

struct StopCriteria {
  int max_new_tokens = 64;
  std::vector<std::string> stop_strings;
};

// Called once per generated token with the text it completes (may be empty while a multi-byte
// character or a possible stop string is pending). Returning false cancels generation.
using TokenSink = std::function<bool(int32_t token, const std::string& delta)>;

struct DecodeResult {
  std::vector<int32_t> tokens;  // generated ids, EOS included when it ended the answer
  std::string text;             // the answer (stop string and EOS excluded)
  FinishReason finish = FinishReason::kLength;
  double decode_ms = 0;  // from the first sampled token to the end
};

// Generates from `first_logits` (the prefill's last-row logits) on `cache`.
absl::StatusOr<DecodeResult> RunDecodeLoop(const LlavaModel& model, KvCache* cache,
                                           std::vector<float> first_logits,
                                           const SamplingParams& sampling,
                                           const StopCriteria& stop, const TokenSink& sink);

// Continues after `first_token`, which `sampler` already drew from the prefill logits (possibly
// in another process: see Sampler::Discard). RunDecodeLoop is this after one Sample().
absl::StatusOr<DecodeResult> ContinueDecodeLoop(const LlavaModel& model, KvCache* cache,
                                                int32_t first_token, Sampler& sampler,
                                                const StopCriteria& stop, const TokenSink& sink);

// Splits streamed text so that a stop string is never emitted: Push() returns what can be shown
// now; `stopped()` tells whether a stop string was found (the text before it was emitted).
class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stop_strings);
  std::string Push(const std::string& text);
  std::string Flush();  // end of generation: releases the held-back tail
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace hap
