#include "runtime/image/clip_preprocess.h"
#include "runtime/model/llava_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/string_view_compat.h"
#include "kernels/backend.h"
#include "runtime/io/preprocessor_config.h"

namespace hap {

namespace {

// The attention ops of the parts to load must take the model's head widths on this backend
// (BackendCaps::max_head_dim): refused at load, naming the field, rather than at a request.
absl::Status CheckHeadDims(const LlavaConfig& cfg, ModelParts parts, const Backend& backend) {
  const int limit = backend.caps().max_head_dim;
  auto check = [&](int head_dim, const char* field) -> absl::Status {
    if (head_dim <= limit) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat(
        "config.json: %s gives heads of %d; the %s backend's attention takes at most %d", field,
        head_dim, std::string(backend.name()), limit));
  };
  if (HasPart(parts, ModelParts::kLanguage)) {
    HAP_RETURN_IF_ERROR(check(cfg.text.head_dim, "text_config.head_dim"));
  }
  if (HasPart(parts, ModelParts::kVision)) {
    const VisionConfig& v = cfg.vision;
    HAP_RETURN_IF_ERROR(check(v.hidden_size / std::max(v.num_attention_heads, 1),
                              "vision_config.hidden_size / num_attention_heads"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlavaModel>> LlavaModel::Load(const std::string& dir,
                                                             const ModelOptions& options) {
  HAP_RETURN_IF_ERROR(BeginModelLoad(dir, options));
  std::unique_ptr<LlavaModel> m(new LlavaModel());
  m->dir_ = dir;
  m->options_ = options;
  HAP_ASSIGN_OR_RETURN(m->config_, LoadLlavaConfig(dir));
  m->text_config_ = m->config_.text;
  HAP_RETURN_IF_ERROR(CheckHeadDims(m->config_, options.parts, m->backend()));
  HAP_ASSIGN_OR_RETURN(m->image_processor_, LoadPreprocessorConfig(dir, m->config_));
  HAP_ASSIGN_OR_RETURN(m->weights_, LlavaWeights::Load(dir, m->config_, options.parts));
  HAP_ASSIGN_OR_RETURN(m->tokenizer_, Tokenizer::LoadFromDirectory(dir));
  HAP_ASSIGN_OR_RETURN(PlacedWeights placed, PlacedWeights::Place(m->backend(), *m->weights_));
  m->placed_ = std::make_unique<PlacedWeights>(std::move(placed));
  if (HasPart(options.parts, ModelParts::kVision) && !m->weights_->vision().layers.empty()) {
    m->vision_attention_ =
        AttentionOperands(options, m->weights_->vision().layers[0].q_w.dtype, m->backend());
  }
  if (HasPart(options.parts, ModelParts::kLanguage)) {
    DType text_attention = DType::kF32;
    if (!m->weights_->text().layers.empty()) {
      text_attention =
          AttentionOperands(options, m->weights_->text().layers[0].q.dtype, m->backend());
    }
    m->decoder_ = std::make_unique<LlamaDecoder>(m->text_config_, m->placed_->text(), m->backend(),
                                                 text_attention, options.decode_graphs);
  }
  return m;
}

std::string LlavaModel::Summary() const {
  return absl::StrFormat(
      "LLaVA: %d decoder layers, hidden %d, %d visual tokens; %.1f MiB of weights as stored, "
      "%.1f MiB converted to F32, %.1f MiB on the device",
      config_.text.num_hidden_layers, config_.text.hidden_size, config_.num_visual_tokens(),
      weights_->stored_bytes() / 1048576.0, weights_->converted_bytes() / 1048576.0,
      placed_->device_bytes() / 1048576.0);
}

absl::StatusOr<std::vector<float>> LlavaModel::PreprocessImage(std::string_view bytes) const {
  HAP_ASSIGN_OR_RETURN(RgbImage image, DecodeImage(bytes, options_.image_limits));
  return ClipPreprocess(image, image_processor_);
}

absl::Status LlavaModel::CheckPixels(const std::vector<float>& pixels) const {
  HAP_RETURN_IF_ERROR(NeedPart(ModelParts::kVision));
  const int64_t want = 3LL * config_.vision.image_size * config_.vision.image_size;
  if (static_cast<int64_t>(pixels.size()) != want) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pixels hold %d values, expected %d (3 x %d x %d)", pixels.size(), want,
                        config_.vision.image_size, config_.vision.image_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> LlavaModel::ImageEmbeddings(
    const std::vector<float>& pixels) const {
  HAP_RETURN_IF_ERROR(CheckPixels(pixels));
  return RunVisionToEmbeddings(backend(), config_, placed_->vision(), placed_->projector(),
                               pixels.data(), vision_attention_);
}

absl::Status LlavaModel::ImageEmbeddingsInBackend(const std::vector<float>& pixels,
                                                  BackendArray<float>* out) const {
  HAP_RETURN_IF_ERROR(CheckPixels(pixels));
  return RunVisionToEmbeddingsInto(backend(), config_, placed_->vision(), placed_->projector(),
                                   pixels.data(), vision_attention_, out);
}

absl::StatusOr<std::vector<float>> LlavaModel::VisionFeatures(
    const std::vector<float>& pixels, VisionFeatureLayer* feature_layer) const {
  HAP_RETURN_IF_ERROR(CheckPixels(pixels));
  return RunVisionTower(backend(), config_, placed_->vision(), pixels.data(), feature_layer,
                        vision_attention_);
}

absl::StatusOr<std::vector<float>> LlavaModel::Project(const std::vector<float>& features,
                                                       int n) const {
  HAP_RETURN_IF_ERROR(NeedPart(ModelParts::kVision));
  if (features.size() != static_cast<size_t>(n) * config_.vision.hidden_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "vision features hold %d values, expected %d x %d", features.size(), n,
        config_.vision.hidden_size));
  }
  return RunProjector(backend(), config_, placed_->projector(), features.data(), n);
}

absl::StatusOr<PromptTokens> LlavaModel::Tokenize(const PromptText& prompt, int n_visual) const {
  if (prompt.rendered) {
    return TokenizeImagePrompt(*tokenizer_, prompt.text, config_.image_token_index, n_visual,
                               max_prompt_tokens());
  }
  return BuildLlavaPrompt(*tokenizer_, prompt.text, config_.image_token_index, n_visual,
                          max_prompt_tokens());
}

absl::StatusOr<PrefillOutput> LlavaModel::Prefill(const PromptTokens& prompt,
                                                  const std::vector<float>& image_embeds,
                                                  Pruner* pruner, Sampler* sampler,
                                                  int kv_reserve_rows) const {
  HAP_ASSIGN_OR_RETURN(
      std::vector<PrefillOutput> outs,
      PrefillBatch({{&prompt, &image_embeds, nullptr, pruner, sampler, kv_reserve_rows}}));
  return std::move(outs[0]);
}

absl::StatusOr<PrefillOutput> LlavaModel::PrefillFromBackend(
    const PromptTokens& prompt, const BackendArray<float>& image_embeds, Pruner* pruner,
    Sampler* sampler, int kv_reserve_rows) const {
  HAP_ASSIGN_OR_RETURN(
      std::vector<PrefillOutput> outs,
      PrefillBatch({{&prompt, nullptr, &image_embeds, pruner, sampler, kv_reserve_rows}}));
  return std::move(outs[0]);
}

absl::StatusOr<std::vector<PrefillOutput>> LlavaModel::PrefillBatch(
    const std::vector<PrefillPrompt>& prompts) const {
  return PrefillBatchOf(prompts, [&](const PrefillPrompt& p, std::vector<int32_t>* ids,
                                     PrefillOutput* out, BackendArray<float>* logits,
                                     PrefillSequence* seq) {
    const BackendArray<float>* in_backend = p.image_embeds_in_backend;
    if (p.prompt == nullptr || (p.image_embeds == nullptr) == (in_backend == nullptr)) {
      return absl::InvalidArgumentError(
          "no prompt tokens, or not exactly one of image embeddings on the host and in the "
          "backend's memory");
    }
    if (in_backend != nullptr && &in_backend->backend() != &backend()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "image embeddings in %s memory for a model on the %s backend",
          std::string(in_backend->backend().name()), std::string(backend().name())));
    }
    const float* image = in_backend != nullptr ? in_backend->data() : p.image_embeds->data();
    const size_t values = in_backend != nullptr ? in_backend->size() : p.image_embeds->size();
    // On a device the prompt is spliced there, unless the pruner reads the whole input on the
    // host.
    const bool splice_in_backend =
        !backend().caps().host_memory && (p.pruner == nullptr || !p.pruner->ReadsInputEmbeddings());
    return PromptSequence(*p.prompt, image, values, in_backend != nullptr, splice_in_backend,
                          p.pruner, p.kv_reserve_rows, ids, out, logits, seq);
  });
}

}  // namespace hap
