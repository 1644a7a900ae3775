// A loaded Qwen2.5-VL checkpoint (config.json, preprocessor_config.json, the safetensors weights,
// tokenizer.json and its chat template) and its pipeline stages: image → patches at the image's
// own resolution → image embeddings (the window-attention vision tower) → chat prompt with the
// image pad expanded → prefill with M-RoPE (optionally pruned; kept tokens keep their 3-D
// positions) → decode steps continuing the rotary positions.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "runtime/image/qwen2vl_preprocess.h"
#include "runtime/io/qwen_config.h"
#include "runtime/io/qwen_weights.h"
#include "runtime/model/llama.h"
#include "runtime/model/llava_model.h"
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

class QwenModel {
 public:
  // InvalidArgument naming the file and field for a config this runtime does not run; NotFound
  // for a missing file or tensor. ModelOptions as LlavaModel's.
  static absl::StatusOr<std::unique_ptr<QwenModel>> Load(const std::string& dir,
                                                         const ModelOptions& options);

  const Qwen25VLConfig& config() const { return config_; }
  const Qwen2VLImageProcessorConfig& image_processor() const { return image_processor_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ChatTemplate& chat_template() const { return chat_template_; }
  const Backend& backend() const {
    return options_.backend != nullptr ? *options_.backend : CpuBackend();
  }
  const std::string& dir() const { return dir_; }

  // Image bytes (JPEG/PNG) → patches and grid at the resolution smart_resize picks.
  absl::StatusOr<Qwen2VLPixels> PreprocessImage(std::string_view image_bytes) const;
  // Patches → image embeddings F32 [grid.patches() / merge², hidden].
  absl::StatusOr<std::vector<float>> ImageEmbeddings(const Qwen2VLPixels& pixels) const;

  // One user turn holding the image and then `question`, rendered by the directory's chat
  // template with the assistant's turn opened; the question stays text. InvalidArgument for an
  // empty question, a template without exactly one image pad for the image, or a prompt longer
  // than the context.
  absl::StatusOr<QwenPrompt> Tokenize(std::string_view question, const ImageGrid& grid) const;

  // The decoder over the prompt with the image embeddings F32 [prompt.tokens.n_vis, hidden] at
  // the image pad tokens; `pruner` may be null. The logits of the last row come back in
  // PrefillOutput::logits (no sampler); the cache continues the rotary positions. On a device
  // backend each layer of the cache gets room for kv_reserve_rows more rows (the answer).
  absl::StatusOr<PrefillOutput> Prefill(const QwenPrompt& prompt,
                                        const std::vector<float>& image_embeds, Pruner* pruner,
                                        int kv_reserve_rows = 0) const;
  // Appends `token` to the cache and returns the next logits F32 [vocab].
  absl::StatusOr<std::vector<float>> DecodeStep(int32_t token, KvStore* cache) const;

 private:
  QwenModel() = default;
  absl::Status NeedPart(ModelParts part) const;

  std::string dir_;
  ModelOptions options_;
  Qwen25VLConfig config_;
  TextConfig text_config_;  // the decoder's view of config_.text
  Qwen2VLImageProcessorConfig image_processor_;
  std::unique_ptr<QwenWeights> weights_;
  // weights_ in the backend's memory (views of weights_ itself on the CPU backend).
  QwenVisionWeights vision_;
  TextWeights text_;
  std::vector<BackendBuffer> storage_;
  int64_t device_bytes_ = 0;
  std::unique_ptr<Tokenizer> tokenizer_;
  ChatTemplate chat_template_ = ChatTemplate::Llava15();
  std::unique_ptr<LlamaDecoder> decoder_;
  DType vision_attention_ = DType::kF32;
};

}  // namespace hap
