#include "runtime/model/qwen_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "runtime/io/preprocessor_config.h"
#include "runtime/model/qwen_vision_tower.h"
#include "runtime/text/chat_prompt.h"

namespace hap {
namespace {

// preprocessor_config.json (the processor's defaults when absent), which must cut the patches
// the vision tower reads.
absl::StatusOr<Qwen2VLImageProcessorConfig> LoadQwenImageProcessor(const std::string& dir,
                                                                   const Qwen25VLConfig& cfg) {
  const std::string path = absl::StrCat(dir, "/preprocessor_config.json");
  Qwen2VLImageProcessorConfig p;
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    HAP_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
    HAP_ASSIGN_OR_RETURN(p, ParseQwen2VLPreprocessorConfig(text, path));
  }
  const Qwen25VLVisionConfig& v = cfg.vision;
  for (const auto& [field, got, want] :
       {std::tuple{"patch_size", p.patch_size, v.patch_size},
        std::tuple{"temporal_patch_size", p.temporal_patch_size, v.temporal_patch_size},
        std::tuple{"merge_size", p.merge_size, v.spatial_merge_size}}) {
    if (got != want) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s is %d; config.json's vision_config says %d", path, field, got, want));
    }
  }
  return p;
}

// The attention ops must take the model's head widths on this backend.
absl::Status CheckQwenHeadDims(const Qwen25VLConfig& cfg, ModelParts parts,
                               const Backend& backend) {
  const int limit = backend.caps().max_head_dim;
  for (const auto& [part, head_dim, field] :
       {std::tuple{ModelParts::kLanguage, cfg.text.head_dim(), "hidden_size / num_attention_heads"},
        std::tuple{ModelParts::kVision, cfg.vision.head_dim(),
                   "vision_config.hidden_size / num_heads"}}) {
    if (HasPart(parts, part) && head_dim > limit) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "config.json: %s gives heads of %d; the %s backend's attention takes at most %d", field,
          head_dim, std::string(backend.name()), limit));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<QwenModel>> QwenModel::Load(const std::string& dir,
                                                           const ModelOptions& options) {
  HAP_RETURN_IF_ERROR(BeginModelLoad(dir, options));
  std::unique_ptr<QwenModel> m(new QwenModel());
  m->dir_ = dir;
  m->options_ = options;
  HAP_ASSIGN_OR_RETURN(m->config_, LoadQwen25VLConfig(dir));
  m->text_config_ = DecoderTextConfig(m->config_);
  HAP_RETURN_IF_ERROR(CheckQwenHeadDims(m->config_, options.parts, m->backend()));
  HAP_ASSIGN_OR_RETURN(m->image_processor_, LoadQwenImageProcessor(dir, m->config_));
  HAP_ASSIGN_OR_RETURN(m->weights_, QwenWeights::Load(dir, m->config_, options.parts));
  HAP_ASSIGN_OR_RETURN(m->tokenizer_, Tokenizer::LoadFromDirectory(dir));
  for (const auto& [id, field] : {std::pair{m->config_.image_token_id, "image_token_id"},
                                  {m->config_.vision_start_token_id, "vision_start_token_id"},
                                  {m->config_.vision_end_token_id, "vision_end_token_id"}}) {
    if (id < 0 || id >= m->tokenizer_->vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s/config.json: %s %d is outside the tokenizer's %d ids (%s)", dir,
                          field, id, m->tokenizer_->vocab_size(), m->tokenizer_->format()));
    }
  }
  HAP_ASSIGN_OR_RETURN(m->chat_template_, ChatTemplate::ForModelDir(dir));

  // The weights in the backend's memory.
  m->vision_ = m->weights_->vision();
  m->text_ = m->weights_->text();
  WeightPlacer place(m->backend(), &m->storage_, &m->device_bytes_);
  QwenVisionWeights& v = m->vision_;
  for (Weight* w :
       {&v.patch_w, &v.merger_norm, &v.merger_w1, &v.merger_b1, &v.merger_w2, &v.merger_b2}) {
    HAP_RETURN_IF_ERROR(place(w));
  }
  for (QwenVisionBlockWeights& b : v.blocks) {
    for (Weight* w : {&b.norm1, &b.norm2, &b.qkv_w, &b.qkv_b, &b.proj_w, &b.proj_b, &b.down_w,
                      &b.down_b, &b.gate_b, &b.up_b}) {
      HAP_RETURN_IF_ERROR(place(w));
    }
    HAP_RETURN_IF_ERROR(place.Together({&b.gate_w, &b.up_w}));
  }
  HAP_RETURN_IF_ERROR(place.PlaceText(&m->text_));
  if (HasPart(options.parts, ModelParts::kVision) && !v.blocks.empty()) {
    m->vision_attention_ = AttentionOperands(options, v.blocks[0].qkv_w.dtype, m->backend());
  }
  if (HasPart(options.parts, ModelParts::kLanguage)) {
    DType text_attention = DType::kF32;
    if (!m->text_.layers.empty()) {
      text_attention = AttentionOperands(options, m->text_.layers[0].q.dtype, m->backend());
    }
    m->decoder_ = std::make_unique<LlamaDecoder>(m->text_config_, m->text_, m->backend(),
                                                 text_attention, options.decode_graphs);
  }
  return m;
}

std::string QwenModel::Summary() const {
  const Checkpoint& c = weights_->checkpoint();
  // One visual token per merged square of this many pixels a side.
  const int64_t unit = int64_t{image_processor_.patch_size} * image_processor_.merge_size;
  return absl::StrFormat(
      "Qwen2.5-VL: %d decoder layers, hidden %d, %d vision blocks, visual tokens by image size "
      "(%d to %d); %.1f MiB of weights as stored, %.1f MiB converted to F32, %.1f MiB on the "
      "device",
      config_.text.num_hidden_layers, config_.text.hidden_size, config_.vision.depth,
      static_cast<int>(image_processor_.min_pixels / (unit * unit)),
      static_cast<int>(image_processor_.max_pixels / (unit * unit)), c.stored_bytes() / 1048576.0,
      c.converted_bytes() / 1048576.0, device_bytes_ / 1048576.0);
}

absl::StatusOr<Qwen2VLPixels> QwenModel::PreprocessImage(std::string_view bytes) const {
  HAP_ASSIGN_OR_RETURN(RgbImage image, DecodeImage(bytes, options_.image_limits));
  return Qwen2VLPreprocess(image, image_processor_);
}

absl::StatusOr<std::vector<float>> QwenModel::ImageEmbeddings(const Qwen2VLPixels& pixels) const {
  HAP_RETURN_IF_ERROR(NeedPart(ModelParts::kVision));
  return RunQwenVision(backend(), config_.vision, vision_, pixels.pixel_values, {pixels.grid},
                       vision_attention_);
}

absl::StatusOr<std::vector<int32_t>> QwenModel::PromptIds(const PromptText& prompt,
                                                          int visual_tokens) const {
  if (prompt.text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return absl::InvalidArgumentError("prompt is empty");
  }
  std::vector<int32_t> ids;
  if (prompt.rendered) {
    ids = tokenizer_->Encode(prompt.text, Tokenizer::SpecialTokens::kRecognized);
  } else {
    nlohmann::json messages = nlohmann::json::array(
        {{{"role", "user"},
          {"content",
           nlohmann::json::array(
               {{{"type", "image"}}, {{"type", "text"}, {"text", std::string(prompt.text)}}})}}});
    HAP_ASSIGN_OR_RETURN(ids, TokenizeChat(*tokenizer_, chat_template_, messages,
                                           /*add_generation_prompt=*/true));
  }
  const int32_t pad = config_.image_token_id;
  const int64_t pads = std::count(ids.begin(), ids.end(), pad);
  if (pads != 1) {
    return absl::InvalidArgumentError(
        prompt.rendered ? absl::StrCat("the prompt holds ", pads, " <|image_pad|> tokens (id ", pad,
                                       "); each request carries exactly one image, placed by one")
                        : absl::StrCat("chat template ", chat_template_.origin(), " renders ", pads,
                                       " image pad tokens (id ", pad,
                                       ") for one image; exactly one was expected"));
  }
  const int max_tokens = max_prompt_tokens();
  const int64_t total = static_cast<int64_t>(ids.size()) - 1 + visual_tokens;
  if (total > max_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("prompt is %d tokens (%d of them the image's); the limit is %d", total,
                        visual_tokens, max_tokens));
  }
  return ids;
}

absl::StatusOr<QwenPrompt> QwenModel::Tokenize(const PromptText& prompt,
                                               const ImageGrid& grid) const {
  const int merge = config_.vision.spatial_merge_size;
  const int64_t n_vis64 = grid.patches() / (merge * merge);
  if (grid.t != 1 || n_vis64 < 1 || grid.h % merge != 0 || grid.w % merge != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("image grid %dx%dx%d is not one frame of whole %dx%d merge units", grid.t,
                        grid.h, grid.w, merge, merge));
  }
  HAP_ASSIGN_OR_RETURN(std::vector<int32_t> ids, PromptIds(prompt, static_cast<int>(n_vis64)));
  const int32_t pad = config_.image_token_id;
  const auto first = std::find(ids.begin(), ids.end(), pad);
  QwenPrompt p;
  p.grid = grid;
  p.tokens.vis_begin = static_cast<int>(first - ids.begin());
  p.tokens.n_vis = static_cast<int>(n_vis64);
  ids.insert(first, static_cast<size_t>(n_vis64) - 1, pad);
  p.tokens.ids = std::move(ids);
  HAP_ASSIGN_OR_RETURN(p.mrope, QwenMropePositions(p.tokens.ids, {grid}, merge, pad));
  return p;
}

absl::StatusOr<PrefillOutput> QwenModel::Prefill(const QwenPrompt& prompt,
                                                 const std::vector<float>& image_embeds,
                                                 Pruner* pruner, Sampler* sampler,
                                                 int kv_reserve_rows) const {
  HAP_ASSIGN_OR_RETURN(std::vector<PrefillOutput> outs,
                       PrefillBatch({{&prompt, &image_embeds, pruner, sampler, kv_reserve_rows}}));
  return std::move(outs[0]);
}

absl::StatusOr<std::vector<PrefillOutput>> QwenModel::PrefillBatch(
    const std::vector<QwenPrefillPrompt>& prompts) const {
  return PrefillBatchOf(
      prompts, [&](const QwenPrefillPrompt& p, std::vector<int32_t>* ids, PrefillOutput* out,
                   BackendArray<float>* logits, PrefillSequence* seq) {
        if (p.prompt == nullptr || p.image_embeds == nullptr) {
          return absl::InvalidArgumentError("no prompt tokens or image embeddings");
        }
        // Spliced on the host; the rows rotate at the prompt's 3-D positions.
        HAP_RETURN_IF_ERROR(PromptSequence(p.prompt->tokens, p.image_embeds->data(),
                                           p.image_embeds->size(), /*image_in_backend=*/false,
                                           /*splice_in_backend=*/false, p.pruner, p.kv_reserve_rows,
                                           ids, out, logits, seq));
        seq->mrope = &p.prompt->mrope;
        return absl::OkStatus();
      });
}

}  // namespace hap
