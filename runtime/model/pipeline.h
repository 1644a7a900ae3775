// One request's stages — encode, prefill (pruned as asked), decode — shared by `hapctl run`
// (all in process, Generate) and the services (each stage in its own process).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/model/generate.h"
#include "runtime/model/llama.h"
#include "runtime/model/llava_model.h"
#include "runtime/model/qwen_model.h"
#include "runtime/prune/factory.h"
#include "runtime/prune/prune_stats.h"

namespace hap {

// Decoder dimensions the planner and pruning methods need, for an image of `visual_tokens`.
ModelDims DimsOf(const TextConfig& text, int visual_tokens);
// LLaVA's; V = the tower's visual tokens.
ModelDims DimsOf(const LlavaConfig& config);
// Qwen2.5-VL's, for an image of `visual_tokens` (its count follows the image's size).
ModelDims DimsOf(const Qwen25VLConfig& config, int visual_tokens);

// Stage 1: image bytes → image embeddings. For "visionzip" the tower's features are compressed
// here (the LLM then sees fewer visual tokens); every other method gets all V tokens.
struct EncodeResult {
  // F32 [n_vis, text hidden], on the host; or, where EncodeImage was asked to keep them in a
  // device backend's memory, there (`embeds` then stays empty): RunPrefill splices them in
  // without a trip through the host.
  std::vector<float> embeds;
  std::shared_ptr<BackendArray<float>> embeds_in_backend;
  int n_vis = 0;
  int image_width = 0;   // the decoded image, before preprocessing
  int image_height = 0;
  ImageGrid grid;  // Qwen2.5-VL: the patch grid the image was cut into (t = 0 for LLaVA)
  double preprocess_ms = 0;
  double encode_ms = 0;  // vision tower + (VisionZip) + projector
};
// keep_in_backend: leave the embeddings in the model's backend's memory where that is not the
// host's (the in-process pipeline, hapctl run); VisionZip's compressed rows come to the host
// anyway. Otherwise (the encoder service, which sends them) they come back to the host.
absl::StatusOr<EncodeResult> EncodeImage(const LlavaModel& model, std::string_view image_bytes,
                                         const PruneRequest& prune, bool keep_in_backend = false);

// Qwen2.5-VL's stage 1: the image at the resolution smart_resize picks, through the window-
// attention tower and merger: grid.h · grid.w / 4 embeddings. InvalidArgument for "visionzip",
// whose dominant tokens are chosen by the attention of a CLS token this tower does not have.
absl::StatusOr<EncodeResult> EncodeImage(const QwenModel& model, std::string_view image_bytes,
                                         const PruneRequest& prune);
// The patch grid an image of `size` gives a Qwen2.5-VL model (smart_resize, then patches).
absl::StatusOr<ImageGrid> ImageGridOf(const QwenModel& model, ImageSize size);
// The visual tokens an image gives a Qwen2.5-VL model (its grid, from the size in the image's
// header: nothing is decoded), for budgets stated against them before the image is encoded.
absl::StatusOr<int> VisualTokensOf(const QwenModel& model, std::string_view image_bytes);

// What prefill did for one request (docs/design.md §3 conventions).
struct PrefillStats {
  std::string method;
  int prompt_tokens = 0;           // unpruned, visual tokens included
  int text_tokens = 0;             // prompt tokens that are not visual
  int visual_tokens = 0;           // visual tokens entering the decoder (V, or VisionZip's R)
  int image_visual_tokens = 0;     // V, what the image gives unpruned
  std::vector<int> layer_visual_tokens;  // [L] visual rows each layer processed
  std::vector<PruneStage> stages;        // pruning events (tokens kept per group/stage)
  double average_visual_tokens = 0;      // Σ_l layer_visual_tokens / L
  double flops_paper = 0;                // Σ_l F(visual tokens of l)
  double flops_full = 0;                 // Σ_l F(all tokens of l)
  double unpruned_flops_paper = 0;       // L·F(V)
  double unpruned_flops_full = 0;        // L·F(text + V)
  int64_t kv_bytes = 0;                  // compacted cache (K and V, in the cache's dtype)
  int64_t kv_bytes_unpruned = 0;         // L · prompt_tokens rows, same dtype
  double score_select_ms = 0;            // time inside the pruning method (PAQ + selection)
  double prefill_ms = 0;
  PruneStats prune;                      // the method's own record (explain data for HAP)
};

// Stage 2: prompt + image embeddings → KV cache, the first token (drawn by `sampler` where the
// logits are: LlavaModel::Prefill) and stats. The prompt is checked before any compute. On a
// device backend the cache stays in the backend's memory, with room for kv_reserve_rows more rows
// per layer (a decode loop that follows in process decodes from it).
struct PrefillResult {
  // As PrefillOutput's: `cache` on the CPU backend, `device_cache` on a device; kv() either.
  KvCache cache;
  std::unique_ptr<DeviceKv> device_cache;
  KvStore& kv() { return device_cache ? *device_cache : static_cast<KvStore&>(cache); }
  const KvStore& kv() const {
    return device_cache ? *device_cache : static_cast<const KvStore&>(cache);
  }
  int32_t first_token = 0;
  RowSamplingCounts first_token_sampling;  // how it was drawn (one row)
  PrefillTrace trace;
  PrefillStats stats;
};
absl::StatusOr<PrefillResult> RunPrefill(const LlavaModel& model, const PromptText& prompt,
                                         const EncodeResult& encoded, const PruneRequest& prune,
                                         Sampler* sampler, int kv_reserve_rows = 0);

// One request's stage 2 in a batched pass (RunPrefillBatch): RunPrefill's arguments.
struct PrefillJob {
  const PromptText* prompt = nullptr;
  const EncodeResult* encoded = nullptr;
  PruneRequest prune;
  Sampler* sampler = nullptr;
  int kv_reserve_rows = 0;
  // May be empty: whether the job's caller has given up. Polled between the pass's layers; once
  // true, the job leaves the pass (Cancelled) and the others go on without its rows.
  std::function<bool()> cancelled;
};
// Several requests' stage 2 in one pass of the decoder (LlavaModel::PrefillBatch): each job's
// result is its own RunPrefill's (bit for bit where the backend's products are row-invariant), or
// its own error. A job whose prompt or budget is refused gets its error and the others go on; a
// job whose caller cancels leaves the pass after the layer running then (Cancelled); if the pass
// itself fails, each job not cancelled runs alone (its sampler as it was before the pass), so one
// request cannot fail the others; a pass cancelled (CancellationRequested: the callers of every
// job gave up) gives each job that Cancelled. Each result's prefill_ms is the pass's.
std::vector<absl::StatusOr<PrefillResult>> RunPrefillBatch(const LlavaModel& model,
                                                           const std::vector<PrefillJob>& jobs);

// Qwen2.5-VL's stage 2: the prompt (a question in the directory's chat template, or a rendered
// one) with the encoded image, pruned as `prune` asks (its budget against this image's visual
// tokens), kept tokens at their original 3-D positions.
absl::StatusOr<PrefillResult> RunPrefill(const QwenModel& model, const PromptText& prompt,
                                         const EncodeResult& encoded, const PruneRequest& prune,
                                         Sampler* sampler, int kv_reserve_rows = 0);
// Qwen2.5-VL's RunPrefillBatch (QwenModel::PrefillBatch).
std::vector<absl::StatusOr<PrefillResult>> RunPrefillBatch(const QwenModel& model,
                                                           const std::vector<PrefillJob>& jobs);

// Warm-up requests a service runs before it serves, so that its first request costs what later
// ones do (on a GPU: kernel modules loaded, product handles made, steps planned, the block cache
// filled; on the CPU: the weights' pages read in). Each returns its wall time in ms.
// WarmUpEncode: one image of the tower's size (a fixed pattern) through EncodeImage with `prune`.
absl::StatusOr<double> WarmUpEncode(const LlavaModel& model, const PruneRequest& prune);
// WarmUpPrefill: a prefill of a short question over an image of zero embeddings (all V
// tokens), pruned by `prune`, its first token drawn greedily where the logits are; with
// prompts > 1, that many of them in one batched pass (RunPrefillBatch), as a service that batches
// its prefills runs them.
absl::StatusOr<double> WarmUpPrefill(const LlavaModel& model, const PruneRequest& prune,
                                     int prompts = 1);
// Qwen2.5-VL's: an image of WarmUpImageSize, a square of 16 x 16 merge units before smart_resize
// (448 pixels a side at patch 14: 256 visual tokens where min_pixels/max_pixels allow).
ImageSize WarmUpImageSize(const QwenModel& model);
absl::StatusOr<double> WarmUpEncode(const QwenModel& model, const PruneRequest& prune);
absl::StatusOr<double> WarmUpPrefill(const QwenModel& model, const PruneRequest& prune,
                                     int prompts = 1);

// Checks a request's prompt and pruning options without running the model (services call this
// on receipt so bad requests fail fast).
absl::Status ValidateRequest(const LlavaModel& model, const PromptText& prompt,
                             const PruneRequest& prune);
// Qwen2.5-VL's, for an image of `visual_tokens` (VisualTokensOf); visionzip is refused.
absl::Status ValidateRequest(const QwenModel& model, const PromptText& prompt,
                             const PruneRequest& prune, int visual_tokens);

// The whole request in process.
struct GenerateRequest {
  std::string image_bytes;  // JPEG or PNG
  std::string prompt;       // the question; the llava template is applied
  SamplingParams sampling;
  StopCriteria stop;
  PruneRequest prune;       // method "none" by default
  GenerateRequest() { prune.method = "none"; }
};

struct StageTimings {
  double preprocess_ms = 0;
  double encode_ms = 0;  // vision tower + projector
  double prefill_ms = 0;
  double ttft_ms = 0;    // request start → first token sampled
  double decode_ms = 0;
  double total_ms = 0;
  double prefill_tokens_per_s = 0;
  double decode_tokens_per_s = 0;  // tokens after the first / their decode time
};

struct GenerateResult {
  DecodeResult decode;
  StageTimings timings;
  PrefillStats stats;
  PrefillTrace trace;
};

absl::StatusOr<GenerateResult> Generate(const LlavaModel& model, const GenerateRequest& request,
                                        const TokenSink& sink);
// The same for Qwen2.5-VL (request.prompt is the question its chat template wraps).
absl::StatusOr<GenerateResult> Generate(const QwenModel& model, const GenerateRequest& request,
                                        const TokenSink& sink);

}  // namespace hap
