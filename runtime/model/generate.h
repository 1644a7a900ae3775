// The decode loop shared by `hapctl run` and the decode service: sample, stream text deltas
// (UTF-8 safe, stop strings held back until decided), stop at EOS, a stop string or max tokens.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/timer.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/sampler.h"
#include "runtime/text/streaming_detokenizer.h"

namespace hap {

class LanguageModel;

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
absl::StatusOr<DecodeResult> RunDecodeLoop(const LanguageModel& model, KvStore* cache,
                                           std::vector<float> first_logits,
                                           const SamplingParams& sampling, const StopCriteria& stop,
                                           const TokenSink& sink);

// Continues after `first_token`, which `sampler` already drew from the prefill logits (possibly
// in another process: see Sampler::Discard). RunDecodeLoop is this after one Sample().
// A cache in the backend's memory (the CPU backend's host cache, a device prefill's DeviceKv)
// is decoded from in place, with room for the answer reserved first; a host cache on a device
// backend is copied into the backend's memory and stays as it was.
absl::StatusOr<DecodeResult> ContinueDecodeLoop(const LanguageModel& model, KvStore* cache,
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

// One answer in the making, a token at a time: sampling state, streaming detokenizer, stop
// strings and limits. ContinueDecodeLoop drives one of these with single decode steps; the
// batching engine drives many, one batched step for all of them.
class TokenStream {
 public:
  TokenStream(const LanguageModel& model, Sampler sampler, const StopCriteria& stop,
              TokenSink sink);

  // Records `token` (already sampled), emits its text and decides whether the answer goes on.
  // Returns true while another decode step with `token` as input is wanted.
  bool Accept(int32_t token);
  bool done() const { return done_; }
  int32_t last_token() const { return result_.tokens.back(); }
  int generated() const { return static_cast<int>(result_.tokens.size()); }
  const Sampler& sampler() const { return sampler_; }
  // The stream's sampler, for a decode step that samples where the logits are
  // (LanguageModel::DecodeBatchSampled); its token then goes to Accept().
  Sampler* mutable_sampler() { return &sampler_; }
  // Ends the answer early (cancelled by the caller, deadline passed).
  void Cancel();
  // Flushes held-back text through the sink and returns the result. Call once, when done().
  DecodeResult Finish();

 private:
  const LanguageModel& model_;
  Sampler sampler_;
  StopCriteria stop_;
  TokenSink sink_;
  StreamingDetokenizer detok_;
  StopStringFilter filter_;
  DecodeResult result_;
  Clock::time_point start_;
  bool done_ = false;
};

}  // namespace hap
