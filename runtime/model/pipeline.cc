#include "runtime/model/pipeline.h"

#include <chrono>

#include "runtime/common/status_macros.h"

namespace hap {
namespace {

double MsBetween(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

absl::StatusOr<GenerateResult> Generate(const LlavaModel& model, const GenerateRequest& request,
                                        const TokenSink& sink) {
  using Clock = std::chrono::steady_clock;
  HAP_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  GenerateResult result;
  const auto t0 = Clock::now();
  // Reject a bad prompt before spending time on the image.
  HAP_RETURN_IF_ERROR(model.Tokenize(request.prompt, model.config().num_visual_tokens()).status());
  HAP_ASSIGN_OR_RETURN(std::vector<float> pixels, model.PreprocessImage(request.image_bytes));
  const auto t1 = Clock::now();
  HAP_ASSIGN_OR_RETURN(std::vector<float> features, model.VisionFeatures(pixels, nullptr));
  const int n_vis = static_cast<int>(features.size() / model.config().vision.hidden_size);
  HAP_ASSIGN_OR_RETURN(std::vector<float> embeds, model.Project(features, n_vis));
  const auto t2 = Clock::now();
  HAP_ASSIGN_OR_RETURN(PromptTokens prompt, model.Tokenize(request.prompt, n_vis));
  HAP_ASSIGN_OR_RETURN(PrefillOutput prefill, model.Prefill(prompt, embeds, nullptr));
  const auto t3 = Clock::now();
  result.prompt_tokens = prefill.prompt_tokens;
  result.visual_tokens = n_vis;
  result.kv_bytes = prefill.cache.bytes();
  result.trace = std::move(prefill.trace);

  bool first = true;
  Clock::time_point t_first;
  auto timed_sink = [&](int32_t token, const std::string& delta) {
    if (first) {
      t_first = Clock::now();
      first = false;
    }
    return sink ? sink(token, delta) : true;
  };
  HAP_ASSIGN_OR_RETURN(result.decode,
                       RunDecodeLoop(model, &prefill.cache, std::move(prefill.logits),
                                     request.sampling, request.stop, timed_sink));
  const auto t4 = Clock::now();
  StageTimings& t = result.timings;
  t.preprocess_ms = MsBetween(t0, t1);
  t.encode_ms = MsBetween(t1, t2);
  t.prefill_ms = MsBetween(t2, t3);
  t.ttft_ms = MsBetween(t0, first ? t4 : t_first);
  t.decode_ms = MsBetween(t3, t4);
  t.total_ms = MsBetween(t0, t4);
  t.prefill_tokens_per_s = t.prefill_ms > 0 ? result.prompt_tokens / (t.prefill_ms / 1e3) : 0;
  const int n_tok = static_cast<int>(result.decode.tokens.size());
  const double after_first_ms = first ? 0 : MsBetween(t_first, t4);
  t.decode_tokens_per_s = (n_tok > 1 && after_first_ms > 0) ? (n_tok - 1) / (after_first_ms / 1e3) : 0;
  return result;
}

}  // namespace hap
