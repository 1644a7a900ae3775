#include "runtime/model/generate.h"

#include <algorithm>

#include "base/status_macros.h"
#include "base/timer.h"
#include "runtime/model/language_model.h"

namespace hap {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

StopStringFilter::StopStringFilter(std::vector<std::string> stop_strings) {
  for (auto& s : stop_strings) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopStringFilter::Push(const std::string& text) {
  if (stopped_) return "";
  pending_ += text;
  // A complete stop string: emit what precedes the earliest one and stop.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringFilter::Flush() {
  std::string out = stopped_ ? "" : pending_;
  pending_.clear();
  return out;
}

absl::StatusOr<DecodeResult> RunDecodeLoop(const LanguageModel& model, KvStore* cache,
                                           std::vector<float> logits,
                                           const SamplingParams& sampling, const StopCriteria& stop,
                                           const TokenSink& sink) {
  HAP_RETURN_IF_ERROR(ValidateSamplingParams(sampling));
  if (stop.max_new_tokens <= 0) return DecodeResult{};
  Sampler sampler(sampling);
  const int32_t first = sampler.Sample(logits);
  return ContinueDecodeLoop(model, cache, first, sampler, stop, sink);
}

TokenStream::TokenStream(const LanguageModel& model, Sampler sampler, const StopCriteria& stop,
                         TokenSink sink)
    : model_(model),
      sampler_(std::move(sampler)),
      stop_(stop),
      sink_(std::move(sink)),
      detok_(model.tokenizer()),
      filter_(stop.stop_strings),
      start_(Clock::now()),
      done_(stop.max_new_tokens <= 0) {}

bool TokenStream::Accept(int32_t token) {
  if (done_) return false;
  result_.tokens.push_back(token);
  if (token == model_.tokenizer().eos_id() || token == model_.text_config().eos_token_id) {
    result_.finish = FinishReason::kEos;
    done_ = true;
    return false;
  }
  const std::string delta = filter_.Push(detok_.Push(token));
  result_.text += delta;
  if (sink_ && !sink_(token, delta)) {
    result_.finish = FinishReason::kCancelled;
  } else if (filter_.stopped()) {
    result_.finish = FinishReason::kStop;
  } else {
    result_.finish = FinishReason::kLength;
    done_ = generated() >= stop_.max_new_tokens;
    return !done_;
  }
  done_ = true;
  return false;
}

void TokenStream::Cancel() {
  if (done_) return;
  result_.finish = FinishReason::kCancelled;
  done_ = true;
}

DecodeResult TokenStream::Finish() {
  if (result_.finish != FinishReason::kCancelled && result_.finish != FinishReason::kStop &&
      !result_.tokens.empty()) {
    const std::string tail = filter_.Push(detok_.Flush());
    const std::string rest = filter_.stopped() ? "" : filter_.Flush();
    if (filter_.stopped()) result_.finish = FinishReason::kStop;
    if (!tail.empty() || !rest.empty()) {
      result_.text += tail + rest;
      if (sink_) sink_(result_.tokens.back(), tail + rest);
    }
  }
  result_.decode_ms = MsSince(start_);
  return std::move(result_);
}

absl::StatusOr<DecodeResult> ContinueDecodeLoop(const LanguageModel& model, KvStore* cache,
                                                int32_t first_token, Sampler& sampler,
                                                const StopCriteria& stop, const TokenSink& sink) {
  // The stream samples with its own copy; hand the caller's state back when done.
  TokenStream stream(model, sampler, stop, sink);
  // The cache gets room for the answer's rows up front (no more than the context holds), so no
  // decode step moves a layer: in place where it is in the backend's memory (a device prefill's
  // cache made with that room already), else in a copy there (the host cache then stays as the
  // prefill left it).
  const int room =
      std::max(0, std::min(stop.max_new_tokens,
                           model.text_config().max_position_embeddings - cache->next_position));
  KvStore* store = cache;
  std::unique_ptr<DeviceKv> device_kv;
  if (cache->device() != model.backend().device()) {
    HAP_ASSIGN_OR_RETURN(device_kv, DeviceKv::FromCache(model.backend(), *cache, room));
    store = device_kv.get();
  } else {
    HAP_RETURN_IF_ERROR(cache->ReserveRows(room));
  }
  bool more = stream.Accept(first_token);
  DecodeWorkspace workspace(model.backend());
  while (more) {
    // On a device only the token (greedy) or a few candidate logits come back per step.
    HAP_ASSIGN_OR_RETURN(std::vector<int32_t> next,
                         model.DecodeBatchSampled({stream.last_token()}, {store},
                                                  {stream.mutable_sampler()}, nullptr, &workspace));
    more = stream.Accept(next[0]);
  }
  sampler = stream.sampler();
  return stream.Finish();
}

}  // namespace hap
