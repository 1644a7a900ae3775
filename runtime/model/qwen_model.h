// A loaded Qwen2.5-VL checkpoint (config.json, preprocessor_config.json, the safetensors weights,
// tokenizer.json and its chat template) and its pipeline stages: image → patches at the image's
// own resolution → image embeddings (the window-attention vision tower) → chat prompt with the
// image pad expanded → prefill with M-RoPE (optionally pruned; kept tokens keep their 3-D
// positions) → decode steps continuing the rotary positions.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "runtime/image/qwen2vl_preprocess.h"
#include "runtime/io/qwen_config.h"
#include "runtime/io/qwen_weights.h"
#include "runtime/model/language_model.h"
#include "runtime/model/mrope_positions.h"
#include "runtime/model/placed_weights.h"
#include "runtime/text/chat_template.h"
#include "runtime/text/llava_prompt.h"
#include "runtime/text/tokenizer.h"

namespace hap {

// A prompt with its image: the ids (the image pad expanded to the image's tokens, which
// `tokens` locates) and the 3-D rotary positions of every token.
struct QwenPrompt {
  PromptTokens tokens;
  ImageGrid grid;
  MropePositions mrope;
};

// One prompt of a batched prefill (QwenModel::PrefillBatch): Prefill's arguments.
struct QwenPrefillPrompt {
  const QwenPrompt* prompt = nullptr;
  const std::vector<float>* image_embeds = nullptr;  // F32 [prompt->tokens.n_vis, hidden], host
  Pruner* pruner = nullptr;                          // may be null
  Sampler* sampler = nullptr;                        // may be null
  int kv_reserve_rows = 0;
  // May be null: polled between layers; once true, the prompt leaves the pass (its output's
  // `cancelled`).
  const std::function<bool()>* cancelled = nullptr;
};

class QwenModel : public LanguageModel {
 public:
  // InvalidArgument naming the file and field for a config this runtime does not run; NotFound
  // for a missing file or tensor. ModelOptions as LlavaModel's.
  static absl::StatusOr<std::unique_ptr<QwenModel>> Load(const std::string& dir,
                                                         const ModelOptions& options);

  const Qwen25VLConfig& config() const { return config_; }
  std::string Summary() const override;
  const Qwen2VLImageProcessorConfig& image_processor() const { return image_processor_; }
  const ChatTemplate& chat_template() const { return chat_template_; }

  // Image bytes (JPEG/PNG) → patches and grid at the resolution smart_resize picks.
  absl::StatusOr<Qwen2VLPixels> PreprocessImage(std::string_view image_bytes) const;
  // Patches → image embeddings F32 [grid.patches() / merge², hidden].
  absl::StatusOr<std::vector<float>> ImageEmbeddings(const Qwen2VLPixels& pixels) const;

  // A question: one user turn holding the image and then the question, rendered by the
  // directory's chat template with the assistant's turn opened; the question stays text. A
  // rendered prompt: tokenized as it is, special tokens recognized (whoever rendered it placed
  // them), its one "<|image_pad|>" the image. InvalidArgument for an empty prompt, a prompt
  // without exactly one image pad, a grid that is not whole merge units, or a prompt longer than
  // the context.
  absl::StatusOr<QwenPrompt> Tokenize(const PromptText& prompt, const ImageGrid& grid) const;
  // The prompt's ids with its one image pad not yet expanded (what Tokenize expands to the
  // grid's tokens), checked as Tokenize checks them for an image of `visual_tokens`.
  absl::StatusOr<std::vector<int32_t>> PromptIds(const PromptText& prompt, int visual_tokens) const;

  // The decoder over the prompt with the image embeddings F32 [prompt.tokens.n_vis, hidden] at
  // the image pad tokens; `pruner` may be null. The first token and the logits as
  // LlavaModel::Prefill gives them (drawn where they are with a sampler, on the host without);
  // the cache continues the rotary positions. On a device backend each layer of the cache gets
  // room for kv_reserve_rows more rows (the answer).
  absl::StatusOr<PrefillOutput> Prefill(const QwenPrompt& prompt,
                                        const std::vector<float>& image_embeds, Pruner* pruner,
                                        Sampler* sampler = nullptr, int kv_reserve_rows = 0) const;
  // Several prompts in one pass of the decoder, as LlavaModel::PrefillBatch.
  absl::StatusOr<std::vector<PrefillOutput>> PrefillBatch(
      const std::vector<QwenPrefillPrompt>& prompts) const;

 private:
  QwenModel() = default;

  Qwen25VLConfig config_;
  Qwen2VLImageProcessorConfig image_processor_;
  std::unique_ptr<QwenWeights> weights_;
  // weights_ in the backend's memory (views of weights_ itself on the CPU backend).
  QwenVisionWeights vision_;
  TextWeights text_;
  std::vector<BackendBuffer> storage_;
  int64_t device_bytes_ = 0;
  ChatTemplate chat_template_ = ChatTemplate::Llava15();
  DType vision_attention_ = DType::kF32;
};

}  // namespace hap
