// A loaded vision-language checkpoint of either family, LLaVA or Qwen2.5-VL, as the services and
// hapctl drive it: pipeline.h's stages behind one interface, so a caller holds no family branch.
// What differs between the families stays in their models: how many visual tokens an image gives
// (LLaVA's fixed V; Qwen2.5-VL's from the image's size), the image placeholder of a rendered
// prompt, and which methods apply (VisionZip needs LLaVA's CLS token).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "runtime/model/generate.h"
#include "runtime/model/language_model.h"
#include "runtime/model/llava_model.h"
#include "runtime/model/pipeline.h"
#include "runtime/model/qwen_model.h"
#include "runtime/prune/factory.h"

namespace hap {

// An image as the vision tower sees it, and where each visual token lies on it: token k covers
// the cell (k / cols, k % cols) of a rows x cols grid over `image`.
struct VisualTokenLayout {
  RgbImage image;  // resized (and cropped) as the image processor does, RGB8
  int rows = 0, cols = 0;
};

class VisionLanguageModel {
 public:
  // The family config.json names, loaded with `options` (LlavaModel::Load, QwenModel::Load).
  static absl::StatusOr<std::unique_ptr<VisionLanguageModel>> Load(const std::string& dir,
                                                                   const ModelOptions& options);
  static std::unique_ptr<VisionLanguageModel> Of(std::unique_ptr<LlavaModel> model);
  static std::unique_ptr<VisionLanguageModel> Of(std::unique_ptr<QwenModel> model);
  virtual ~VisionLanguageModel() = default;

  virtual const LanguageModel& language() const = 0;
  const std::string& dir() const { return language().dir(); }
  const TextConfig& text_config() const { return language().text_config(); }
  std::string Summary() const { return language().Summary(); }
  // "llava" or "qwen2.5-vl".
  virtual std::string_view family() const = 0;
  // What a rendered prompt (PromptText::Rendered) holds exactly once where the image goes:
  // "<image>" (LLaVA) or "<|image_pad|>" (Qwen2.5-VL, between <|vision_start|> and
  // <|vision_end|>, as its chat template places it).
  virtual std::string_view image_placeholder() const = 0;
  // Whether a rendered prompt is read with special tokens recognized (Qwen2.5-VL's chat markup
  // is special tokens; LLaVA's rendered prompts are text around "<image>"). Where it is, text a
  // client wrote must not spell them (Tokenizer::Encode's two modes differ on such text).
  virtual bool rendered_prompt_reads_special_tokens() const = 0;

  // The visual tokens an image gives unpruned: LLaVA's fixed count, or Qwen2.5-VL's from the
  // size in the image's header (nothing is decoded). Errors as ReadImageSize's.
  virtual absl::StatusOr<int> VisualTokensOf(std::string_view image_bytes) const = 0;
  // An image's visual tokens where no image is at hand (a default budget checked at start-up):
  // LLaVA's fixed count; Qwen2.5-VL's for the warm-up image (WarmUpImageSize).
  virtual absl::StatusOr<int> reference_visual_tokens() const = 0;
  // Decoder dimensions for an image of `visual_tokens`.
  ModelDims Dims(int visual_tokens) const { return DimsOf(text_config(), visual_tokens); }
  // The rows the encoder sends for an image of `visual_tokens` under `prune`: VisionZip's
  // compressed count, else all of them.
  virtual absl::StatusOr<int> EncodedTokens(const PruneRequest& prune, int visual_tokens) const;

  // A request's prompt and pruning checked against an image of `visual_tokens` without running
  // the model (the prompt's length, the method and its budget).
  virtual absl::Status ValidateRequest(const PromptText& prompt, const PruneRequest& prune,
                                       int visual_tokens) const = 0;
  virtual absl::StatusOr<EncodeResult> EncodeImage(std::string_view image_bytes,
                                                   const PruneRequest& prune,
                                                   bool keep_in_backend = false) const = 0;
  virtual absl::StatusOr<PrefillResult> RunPrefill(const PromptText& prompt,
                                                   const EncodeResult& encoded,
                                                   const PruneRequest& prune, Sampler* sampler,
                                                   int kv_reserve_rows = 0) const = 0;
  // Several requests' stage 2 in one pass of the decoder (pipeline.h RunPrefillBatch).
  virtual std::vector<absl::StatusOr<PrefillResult>> RunPrefillBatch(
      const std::vector<PrefillJob>& jobs) const = 0;
  virtual absl::StatusOr<double> WarmUpEncode(const PruneRequest& prune) const = 0;
  // pipeline.h's WarmUpPrefill: one prefill, or `prompts` in one batched pass.
  virtual absl::StatusOr<double> WarmUpPrefill(const PruneRequest& prune, int prompts) const = 0;
  virtual absl::StatusOr<GenerateResult> Generate(const GenerateRequest& request,
                                                  const TokenSink& sink) const = 0;

  // For tools that look inside one request (hapctl explain):
  // The prompt's ids for an encoded image (where its visual rows sit).
  virtual absl::StatusOr<PromptTokens> Tokenize(const PromptText& prompt,
                                                const EncodeResult& encoded) const = 0;
  // The model's prefill of the prompt over an encoded image (embeddings on the host) with
  // `pruner` as its pruning hook (null: none), the logits returned.
  virtual absl::StatusOr<PrefillOutput> Prefill(const PromptText& prompt,
                                                const EncodeResult& encoded,
                                                Pruner* pruner) const = 0;
  // The image as the tower sees it and its visual tokens' cells. FailedPrecondition where
  // tokens do not map to cells (LLaVA's "full" strategy keeps the CLS token).
  virtual absl::StatusOr<VisualTokenLayout> TokenLayoutOf(std::string_view image_bytes) const = 0;
};

}  // namespace hap
