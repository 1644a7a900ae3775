#include "runtime/model/vision_language_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "base/status_macros.h"
#include "runtime/image/resize.h"
#include "runtime/io/qwen_config.h"
#include "runtime/prune/visionzip.h"

namespace hap {

namespace {

// Normalised pixels F32 [3, size, size] back to RGB8: pixel = (x·std + mean)·255.
RgbImage Denormalise(const std::vector<float>& pixels, int size, const std::array<double, 3>& mean,
                     const std::array<double, 3>& std) {
  RgbImage img;
  img.width = img.height = size;
  img.pixels.resize(static_cast<size_t>(size) * size * 3);
  const size_t plane = static_cast<size_t>(size) * size;
  for (int c = 0; c < 3; ++c) {
    for (size_t i = 0; i < plane; ++i) {
      const double v = (pixels[c * plane + i] * std[c] + mean[c]) * 255.0;
      img.pixels[i * 3 + c] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
    }
  }
  return img;
}

// What both families' pipelines forward alike to pipeline.h's overloads for `Model`.
template <typename Model>
class PipelineOf : public VisionLanguageModel {
 public:
  explicit PipelineOf(std::unique_ptr<Model> model) : model_(std::move(model)) {}

  const LanguageModel& language() const override { return *model_; }
  absl::StatusOr<PrefillResult> RunPrefill(const PromptText& prompt, const EncodeResult& encoded,
                                           const PruneRequest& prune, Sampler* sampler,
                                           int kv_reserve_rows) const override {
    return hap::RunPrefill(*model_, prompt, encoded, prune, sampler, kv_reserve_rows);
  }
  std::vector<absl::StatusOr<PrefillResult>> RunPrefillBatch(
      const std::vector<PrefillJob>& jobs) const override {
    return hap::RunPrefillBatch(*model_, jobs);
  }
  absl::StatusOr<double> WarmUpEncode(const PruneRequest& prune) const override {
    return hap::WarmUpEncode(*model_, prune);
  }
  absl::StatusOr<double> WarmUpPrefill(const PruneRequest& prune, int prompts) const override {
    return hap::WarmUpPrefill(*model_, prune, prompts);
  }
  absl::StatusOr<GenerateResult> Generate(const GenerateRequest& request,
                                          const TokenSink& sink) const override {
    return hap::Generate(*model_, request, sink);
  }

 protected:
  std::unique_ptr<Model> model_;
};

class LlavaPipeline final : public PipelineOf<LlavaModel> {
 public:
  using PipelineOf::PipelineOf;

  std::string_view family() const override { return "llava"; }
  std::string_view image_placeholder() const override { return "<image>"; }
  bool rendered_prompt_reads_special_tokens() const override { return false; }

  absl::StatusOr<int> VisualTokensOf(std::string_view) const override {
    return model_->config().num_visual_tokens();
  }
  absl::StatusOr<int> reference_visual_tokens() const override {
    return model_->config().num_visual_tokens();
  }
  absl::StatusOr<int> EncodedTokens(const PruneRequest& prune, int visual_tokens) const override {
    if (prune.method != "visionzip") return visual_tokens;
    HAP_ASSIGN_OR_RETURN(VisionZipCounts zip, VisionZipCountsFor(prune, DimsOf(model_->config())));
    return zip.enabled() ? zip.total() : visual_tokens;
  }

  absl::Status ValidateRequest(const PromptText& prompt, const PruneRequest& prune,
                               int) const override {
    return hap::ValidateRequest(*model_, prompt, prune);
  }
  absl::StatusOr<EncodeResult> EncodeImage(std::string_view image_bytes, const PruneRequest& prune,
                                           bool keep_in_backend) const override {
    return hap::EncodeImage(*model_, image_bytes, prune, keep_in_backend);
  }

  absl::StatusOr<PromptTokens> Tokenize(const PromptText& prompt,
                                        const EncodeResult& encoded) const override {
    return model_->Tokenize(prompt, encoded.n_vis);
  }
  absl::StatusOr<PrefillOutput> Prefill(const PromptText& prompt, const EncodeResult& encoded,
                                        Pruner* pruner) const override {
    HAP_ASSIGN_OR_RETURN(PromptTokens tokens, Tokenize(prompt, encoded));
    return model_->Prefill(tokens, encoded.embeds, pruner);
  }
  absl::StatusOr<VisualTokenLayout> TokenLayoutOf(std::string_view image_bytes) const override {
    const LlavaConfig& cfg = model_->config();
    if (cfg.vision_feature_select_strategy != "default") {
      return absl::FailedPreconditionError(
          "visual tokens map to image patches only for vision_feature_select_strategy "
          "'default' (with 'full' the first one is the CLS token)");
    }
    HAP_ASSIGN_OR_RETURN(std::vector<float> pixels, model_->PreprocessImage(image_bytes));
    const ImageProcessorConfig& p = model_->image_processor();
    VisualTokenLayout out;
    out.image = Denormalise(pixels, cfg.vision.image_size, p.image_mean, p.image_std);
    out.rows = out.cols = cfg.vision.image_size / cfg.vision.patch_size;
    return out;
  }
};

class QwenPipeline final : public PipelineOf<QwenModel> {
 public:
  using PipelineOf::PipelineOf;

  std::string_view family() const override { return "qwen2.5-vl"; }
  std::string_view image_placeholder() const override { return "<|image_pad|>"; }
  bool rendered_prompt_reads_special_tokens() const override { return true; }

  absl::StatusOr<int> VisualTokensOf(std::string_view image_bytes) const override {
    return hap::VisualTokensOf(*model_, image_bytes);
  }
  absl::StatusOr<int> reference_visual_tokens() const override {
    HAP_ASSIGN_OR_RETURN(ImageGrid grid, ImageGridOf(*model_, WarmUpImageSize(*model_)));
    const int merge = model_->image_processor().merge_size;
    return static_cast<int>(grid.patches() / (merge * merge));
  }

  absl::Status ValidateRequest(const PromptText& prompt, const PruneRequest& prune,
                               int visual_tokens) const override {
    return hap::ValidateRequest(*model_, prompt, prune, visual_tokens);
  }
  absl::StatusOr<EncodeResult> EncodeImage(std::string_view image_bytes, const PruneRequest& prune,
                                           bool) const override {
    return hap::EncodeImage(*model_, image_bytes, prune);
  }

  absl::StatusOr<PromptTokens> Tokenize(const PromptText& prompt,
                                        const EncodeResult& encoded) const override {
    HAP_ASSIGN_OR_RETURN(QwenPrompt p, model_->Tokenize(prompt, encoded.grid));
    return p.tokens;
  }
  absl::StatusOr<PrefillOutput> Prefill(const PromptText& prompt, const EncodeResult& encoded,
                                        Pruner* pruner) const override {
    HAP_ASSIGN_OR_RETURN(QwenPrompt p, model_->Tokenize(prompt, encoded.grid));
    return model_->Prefill(p, encoded.embeds, pruner);
  }
  // The merger's output runs over 2 x 2 merge units row by row, so token k is the unit
  // (k / (grid.w / merge), k % (grid.w / merge)) of the resized image.
  absl::StatusOr<VisualTokenLayout> TokenLayoutOf(std::string_view image_bytes) const override {
    HAP_ASSIGN_OR_RETURN(RgbImage image, DecodeImage(image_bytes, model_->options().image_limits));
    HAP_ASSIGN_OR_RETURN(ImageGrid grid,
                         ImageGridOf(*model_, ImageSize{image.width, image.height}));
    const Qwen2VLImageProcessorConfig& p = model_->image_processor();
    VisualTokenLayout out;
    out.image = Resize(image, p.resample, grid.w * p.patch_size, grid.h * p.patch_size);
    out.rows = grid.h / p.merge_size;
    out.cols = grid.w / p.merge_size;
    return out;
  }
};

}  // namespace

absl::StatusOr<int> VisionLanguageModel::EncodedTokens(const PruneRequest&,
                                                       int visual_tokens) const {
  return visual_tokens;
}

std::unique_ptr<VisionLanguageModel> VisionLanguageModel::Of(std::unique_ptr<LlavaModel> model) {
  return std::make_unique<LlavaPipeline>(std::move(model));
}

std::unique_ptr<VisionLanguageModel> VisionLanguageModel::Of(std::unique_ptr<QwenModel> model) {
  return std::make_unique<QwenPipeline>(std::move(model));
}

absl::StatusOr<std::unique_ptr<VisionLanguageModel>> VisionLanguageModel::Load(
    const std::string& dir, const ModelOptions& options) {
  if (IsQwen25VLDirectory(dir)) {
    HAP_ASSIGN_OR_RETURN(std::unique_ptr<QwenModel> qwen, QwenModel::Load(dir, options));
    return Of(std::move(qwen));
  }
  HAP_ASSIGN_OR_RETURN(std::unique_ptr<LlavaModel> llava, LlavaModel::Load(dir, options));
  return Of(std::move(llava));
}

}  // namespace hap
