#include "runtime/model/generate.h"

#include <chrono>

#include "runtime/common/status_macros.h"
#include "runtime/model/llava_model.h"
#include "runtime/text/streaming_detokenizer.h"

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

absl::StatusOr<DecodeResult> RunDecodeLoop(const LlavaModel& model, KvCache* cache,
                                           std::vector<float> logits,
                                           const SamplingParams& sampling,
                                           const StopCriteria& stop, const TokenSink& sink) {
  HAP_RETURN_IF_ERROR(ValidateSamplingParams(sampling));
  if (stop.max_new_tokens <= 0) return DecodeResult{};
  Sampler sampler(sampling);
  const int32_t first = sampler.Sample(logits);
  return ContinueDecodeLoop(model, cache, first, sampler, stop, sink);
}

absl::StatusOr<DecodeResult> ContinueDecodeLoop(const LlavaModel& model, KvCache* cache,
                                                int32_t first_token, Sampler& sampler,
                                                const StopCriteria& stop, const TokenSink& sink) {
  const auto t0 = std::chrono::steady_clock::now();
  StreamingDetokenizer detok(model.tokenizer());
  StopStringFilter filter(stop.stop_strings);
  const int32_t eos = model.tokenizer().eos_id();
  DecodeResult result;
  auto emit = [&](int32_t token, const std::string& delta) {
    result.text += delta;
    return sink ? sink(token, delta) : true;
  };
  int32_t token = first_token;
  for (int i = 0; i < stop.max_new_tokens; ++i) {
    if (i > 0) {
      HAP_ASSIGN_OR_RETURN(std::vector<float> logits, model.DecodeStep(token, cache));
      token = sampler.Sample(logits);
    }
    result.tokens.push_back(token);
    if (token == eos || token == model.config().text.eos_token_id) {
      result.finish = FinishReason::kEos;
      break;
    }
    const std::string delta = filter.Push(detok.Push(token));
    if (!emit(token, delta)) {
      result.finish = FinishReason::kCancelled;
      break;
    }
    if (filter.stopped()) {
      result.finish = FinishReason::kStop;
      break;
    }
    result.finish = FinishReason::kLength;
  }
  if (result.finish != FinishReason::kCancelled && result.finish != FinishReason::kStop) {
    const std::string tail = filter.Push(detok.Flush());
    const std::string rest = filter.stopped() ? "" : filter.Flush();
    if (filter.stopped()) result.finish = FinishReason::kStop;
    if (!tail.empty() || !rest.empty()) emit(result.tokens.back(), tail + rest);
  }
  result.decode_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace hap
