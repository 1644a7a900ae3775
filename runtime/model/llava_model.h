// A loaded LLaVA checkpoint (config, weights, tokenizer) and its pipeline stages:
// image → pixels → visual embeddings → prompt → prefill (optionally pruned) → decode steps.
// Stages are separate so the services can run them in different processes.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "runtime/image/clip_preprocess.h"
#include "runtime/image/image.h"
#include "runtime/io/config.h"
#include "runtime/io/weights.h"
#include "runtime/model/language_model.h"
#include "runtime/model/placed_weights.h"
#include "runtime/model/vision_tower.h"
#include "runtime/prune/pruner.h"
#include "runtime/text/llava_prompt.h"
#include "runtime/text/tokenizer.h"

namespace hap {

// One prompt of a batched prefill (LlavaModel::PrefillBatch): Prefill's arguments.
struct PrefillPrompt {
  const PromptTokens* prompt = nullptr;
  // F32 [prompt->n_vis, hidden]: on the host, or in the backend's memory
  // (ImageEmbeddingsInBackend, as PrefillFromBackend takes them); one of the two.
  const std::vector<float>* image_embeds = nullptr;
  const BackendArray<float>* image_embeds_in_backend = nullptr;
  Pruner* pruner = nullptr;    // may be null
  Sampler* sampler = nullptr;  // may be null
  int kv_reserve_rows = 0;
  // May be null: polled between layers; once true, the prompt leaves the pass (its output's
  // `cancelled`).
  const std::function<bool()>* cancelled = nullptr;
};

class LlavaModel : public LanguageModel {
 public:
  // Loads config.json, preprocessor_config.json (CLIP's values when absent), the safetensors
  // weights and the tokenizer (tokenizer.json where present, else tokenizer.model) from `dir`.
  static absl::StatusOr<std::unique_ptr<LlavaModel>> Load(const std::string& dir,
                                                          const ModelOptions& options);

  const LlavaConfig& config() const { return config_; }
  std::string Summary() const override;
  const ImageProcessorConfig& image_processor() const { return image_processor_; }
  const LlavaWeights& weights() const { return *weights_; }
  // The weights as the backend reads them (uploaded once for a device backend).
  const PlacedWeights& placed_weights() const { return *placed_; }

  // Image bytes (JPEG/PNG) → F32 [3, S, S] pixels as preprocessor_config.json says.
  absl::StatusOr<std::vector<float>> PreprocessImage(std::string_view image_bytes) const;

  // Pixels → vision features F32 [V, vision_hidden] (before the projector).
  absl::StatusOr<std::vector<float>> VisionFeatures(const std::vector<float>& pixels,
                                                    VisionFeatureLayer* feature_layer) const;
  // Vision features F32 [n, vision_hidden] → image embeddings F32 [n, hidden].
  absl::StatusOr<std::vector<float>> Project(const std::vector<float>& features, int n) const;
  // Project(VisionFeatures(pixels)) with the features kept in the backend's memory between the
  // two (on a device they never come to the host): image embeddings F32 [V, hidden].
  absl::StatusOr<std::vector<float>> ImageEmbeddings(const std::vector<float>& pixels) const;
  // The same, left in the backend's memory (`out`, resized): what a prefill in this process
  // splices in without a trip through the host (PrefillFromBackend).
  absl::Status ImageEmbeddingsInBackend(const std::vector<float>& pixels,
                                        BackendArray<float>* out) const;

  // The prompt's ids with `n_visual` image tokens (InvalidArgument for an empty or too long
  // prompt, and for a rendered one without exactly one "<image>").
  absl::StatusOr<PromptTokens> Tokenize(const PromptText& prompt, int n_visual) const;

  // Runs the decoder over the prompt with the image embeddings F32 [prompt.n_vis, hidden]
  // spliced in at the image tokens. `pruner` may be null. With a `sampler`, the first token is
  // drawn where the last row's logits are, exactly as sampler->Sample(those logits) would: on a
  // device only its id or its top candidates come back (SampleRows; a row only where those
  // cannot decide), the CPU backend samples its host logits in place; `logits` stays empty.
  // Without one (hapctl dump, tests), the logits are copied to `logits` and nothing is drawn.
  // On a device backend each layer of the cache gets room for kv_reserve_rows more rows (the
  // answer, where a decode follows in this process); the CPU backend's host cache grows as
  // needed.
  absl::StatusOr<PrefillOutput> Prefill(const PromptTokens& prompt,
                                        const std::vector<float>& image_embeds, Pruner* pruner,
                                        Sampler* sampler = nullptr, int kv_reserve_rows = 0) const;
  // Prefill with the image embeddings in the backend's memory (ImageEmbeddingsInBackend), as
  // they are: spliced in there, or copied to the host first for a pruner that reads the input
  // embeddings there.
  absl::StatusOr<PrefillOutput> PrefillFromBackend(const PromptTokens& prompt,
                                                   const BackendArray<float>& image_embeds,
                                                   Pruner* pruner, Sampler* sampler = nullptr,
                                                   int kv_reserve_rows = 0) const;
  // Several prompts in one pass of the decoder (LlamaDecoder::PrefillBatchInto): each prompt's
  // output is its own Prefill's (bit for bit where the backend's products are row-invariant;
  // see there), while every product reads each weight once for all of them.
  absl::StatusOr<std::vector<PrefillOutput>> PrefillBatch(
      const std::vector<PrefillPrompt>& prompts) const;

 private:
  LlavaModel() = default;

  LlavaConfig config_;
  ImageProcessorConfig image_processor_;
  std::unique_ptr<LlavaWeights> weights_;
  // weights_ in the backend's memory (views of weights_ itself on the CPU backend).
  std::unique_ptr<PlacedWeights> placed_;
  // InvalidArgument unless pixels hold 3 × image_size² values (and the vision part is loaded).
  absl::Status CheckPixels(const std::vector<float>& pixels) const;
  DType vision_attention_ = DType::kF32;  // AttentionArgs::operands of the vision tower
};

}  // namespace hap
