#include "runtime/model/pipeline.h"

#include <chrono>
#include <functional>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/timer.h"
#include "runtime/image/clip_preprocess.h"
#include "runtime/image/png_encode.h"
#include "runtime/prune/planner.h"
#include "runtime/prune/visionzip.h"

namespace hap {

ModelDims DimsOf(const TextConfig& text, int visual_tokens) {
  // In ModelDims's field order: layers, width, FFN width, heads, KV heads, head width, V.
  return ModelDims{
      text.num_hidden_layers,   text.hidden_size, text.intermediate_size, text.num_attention_heads,
      text.num_key_value_heads, text.head_dim,    visual_tokens};
}

ModelDims DimsOf(const LlavaConfig& config) {
  return DimsOf(config.text, config.num_visual_tokens());
}

ModelDims DimsOf(const Qwen25VLConfig& config, int visual_tokens) {
  return DimsOf(DecoderTextConfig(config), visual_tokens);
}

namespace {

// A prefill's output and stats: `out` moved into a PrefillResult, the FLOPs and KV sizes over
// `dims` (V = dims.n_visual_tokens, what the image gives unpruned), `n_vis` visual tokens
// entering the decoder, the pruner's own record.
PrefillResult ResultOf(PrefillOutput out, const ModelDims& dims, const std::string& method,
                       int n_vis, const Pruner& pruner, Clock::time_point t0) {
  PrefillResult result;
  result.first_token = out.first_token;
  result.first_token_sampling = out.sampling;
  result.cache = std::move(out.cache);
  result.device_cache = std::move(out.device_cache);
  result.trace = std::move(out.trace);

  PrefillStats& s = result.stats;
  s.method = method;
  s.prompt_tokens = out.prompt_tokens;
  s.visual_tokens = n_vis;
  s.image_visual_tokens = dims.n_visual_tokens;
  s.text_tokens = out.prompt_tokens - n_vis;
  s.layer_visual_tokens = result.trace.visual_tokens_per_layer;
  const int L = dims.n_layers;
  const double D = dims.d_model, F = dims.d_ffn;
  const int V = s.image_visual_tokens;
  double sum_vis = 0;
  for (int l = 0; l < L; ++l) {
    const int vis = s.layer_visual_tokens[l];
    sum_vis += vis;
    s.flops_paper += LayerFlops(vis, D, F);
    s.flops_full += LayerFlops(s.text_tokens + vis, D, F);
  }
  s.average_visual_tokens = sum_vis / L;
  s.unpruned_flops_paper = L * LayerFlops(V, D, F);
  s.unpruned_flops_full = L * LayerFlops(s.text_tokens + V, D, F);
  s.kv_bytes = result.kv().bytes();
  s.kv_bytes_unpruned = static_cast<int64_t>(L) * (s.text_tokens + V) * 2 * result.kv().row_bytes();
  s.prune = pruner.stats();
  s.stages = s.prune.stages;
  s.score_select_ms = s.prune.score_select_us / 1e3;
  s.prefill_ms = MsBetween(t0, Clock::now());
  return result;
}

// A request's pruner for a prompt of `prompt_tokens`, `n_vis` of them visual.
absl::StatusOr<std::unique_ptr<Pruner>> PrunerFor(const PruneRequest& prune, const ModelDims& dims,
                                                  int prompt_tokens, int n_vis) {
  PruneRequest req = prune;
  req.text_tokens = prompt_tokens - n_vis;
  return MakePruner(req, dims);
}

// Generate after the image is encoded: prefill (drawing the first token), then the decode loop
// on the prefill's cache, with the request's timings. `prefill` runs stage 2.
absl::StatusOr<GenerateResult> DecodeAfterPrefill(
    const LanguageModel& model, const GenerateRequest& request, const EncodeResult& encoded,
    Clock::time_point t0, const TokenSink& sink,
    const std::function<absl::StatusOr<PrefillResult>(Sampler*)>& prefill) {
  GenerateResult result;
  Sampler sampler(request.sampling);
  HAP_ASSIGN_OR_RETURN(PrefillResult pre, prefill(&sampler));
  const auto t_first = Clock::now();
  result.stats = std::move(pre.stats);
  result.trace = std::move(pre.trace);
  StopCriteria stop = request.stop;
  HAP_ASSIGN_OR_RETURN(result.decode,
                       ContinueDecodeLoop(model, &pre.kv(), pre.first_token, sampler, stop, sink));
  const auto t_end = Clock::now();
  StageTimings& t = result.timings;
  t.preprocess_ms = encoded.preprocess_ms;
  t.encode_ms = encoded.encode_ms;
  t.prefill_ms = result.stats.prefill_ms;
  t.ttft_ms = MsBetween(t0, t_first);
  t.decode_ms = MsBetween(t_first, t_end);
  t.total_ms = MsBetween(t0, t_end);
  t.prefill_tokens_per_s = t.prefill_ms > 0 ? result.stats.prompt_tokens / (t.prefill_ms / 1e3) : 0;
  const size_t n_tok = result.decode.tokens.size();
  t.decode_tokens_per_s = (n_tok > 1 && t.decode_ms > 0) ? (n_tok - 1) / (t.decode_ms / 1e3) : 0;
  return result;
}

// Qwen2.5-VL's tower has no CLS token for VisionZip to read.
absl::Status RefuseVisionZip(const PruneRequest& prune) {
  if (prune.method != "visionzip") return absl::OkStatus();
  return absl::InvalidArgumentError(
      "visionzip picks its dominant tokens by the attention of the vision tower's CLS token; "
      "Qwen2.5-VL's tower has none (use hap, divprune or another method that prunes in the "
      "language model)");
}

}  // namespace

absl::Status ValidateRequest(const LlavaModel& model, const PromptText& prompt,
                             const PruneRequest& prune) {
  HAP_ASSIGN_OR_RETURN(PromptTokens tokens,
                       model.Tokenize(prompt, model.config().num_visual_tokens()));
  PruneRequest req = prune;
  req.text_tokens = static_cast<int>(tokens.ids.size()) - tokens.n_vis;
  HAP_RETURN_IF_ERROR(MakePruner(req, DimsOf(model.config())).status());
  return absl::OkStatus();
}

absl::StatusOr<EncodeResult> EncodeImage(const LlavaModel& model, std::string_view image_bytes,
                                         const PruneRequest& prune, bool keep_in_backend) {
  const LlavaConfig& cfg = model.config();
  EncodeResult out;
  const auto t0 = Clock::now();
  HAP_ASSIGN_OR_RETURN(RgbImage image, DecodeImage(image_bytes, model.options().image_limits));
  out.image_width = image.width;
  out.image_height = image.height;
  HAP_ASSIGN_OR_RETURN(std::vector<float> pixels, ClipPreprocess(image, model.image_processor()));
  const auto t1 = Clock::now();

  VisionZipCounts zip;
  if (prune.method == "visionzip") {
    HAP_ASSIGN_OR_RETURN(zip, VisionZipCountsFor(prune, DimsOf(cfg)));
  }
  if (!zip.enabled()) {
    // Tower and projector with the features handed over in the backend's memory.
    if (keep_in_backend && !model.backend().caps().host_memory) {
      out.embeds_in_backend = std::make_shared<BackendArray<float>>(model.backend());
      HAP_RETURN_IF_ERROR(model.ImageEmbeddingsInBackend(pixels, out.embeds_in_backend.get()));
      out.n_vis = static_cast<int>(out.embeds_in_backend->size() / cfg.text.hidden_size);
    } else {
      HAP_ASSIGN_OR_RETURN(out.embeds, model.ImageEmbeddings(pixels));
      out.n_vis = static_cast<int>(out.embeds.size() / cfg.text.hidden_size);
    }
    out.preprocess_ms = MsBetween(t0, t1);
    out.encode_ms = MsBetween(t1, Clock::now());
    return out;
  }
  // VisionZip compresses the feature layer's rows from its Q, K and output, which stay in the
  // backend's memory for it.
  VisionFeatureLayer feature_layer;
  HAP_RETURN_IF_ERROR(model.VisionFeatures(pixels, &feature_layer).status());
  VisionZipInput in;
  in.q = feature_layer.q.data();
  in.k = feature_layer.k.data();
  in.hidden = feature_layer.hidden.data();
  in.n_tokens = feature_layer.n_tokens;
  in.n_heads = feature_layer.n_heads;
  in.head_dim = feature_layer.head_dim;
  in.d_model = cfg.vision.hidden_size;
  in.scale = feature_layer.scale;
  in.backend = &feature_layer.hidden.backend();  // the model's backend, which ran the tower
  HAP_ASSIGN_OR_RETURN(std::vector<float> features, VisionZipCompress(in, zip));
  HAP_ASSIGN_OR_RETURN(out.embeds, model.Project(features, zip.total()));
  out.n_vis = zip.total();
  out.preprocess_ms = MsBetween(t0, t1);
  out.encode_ms = MsBetween(t1, Clock::now());
  return out;
}

absl::StatusOr<double> WarmUpEncode(const LlavaModel& model, const PruneRequest& prune) {
  HAP_ASSIGN_OR_RETURN(std::string png, PatternPng(model.config().vision.image_size));
  const auto t0 = Clock::now();
  HAP_RETURN_IF_ERROR(EncodeImage(model, png, prune).status());
  return MsBetween(t0, Clock::now());
}

namespace {

// WarmUpPrefill of either family over `image`: one prefill, or `prompts` in one batched pass.
template <typename Model>
absl::StatusOr<double> WarmUpPrefillOver(const Model& model, const EncodeResult& image,
                                         const PruneRequest& prune, int prompts) {
  const PromptText question("What is in the picture?");
  std::vector<Sampler> greedy(static_cast<size_t>(std::max(prompts, 1)), Sampler{SamplingParams{}});
  const auto t0 = Clock::now();
  if (prompts <= 1) {
    HAP_RETURN_IF_ERROR(RunPrefill(model, question, image, prune, &greedy[0]).status());
    return MsBetween(t0, Clock::now());
  }
  std::vector<PrefillJob> jobs(greedy.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].prompt = &question;
    jobs[i].encoded = &image;
    jobs[i].prune = prune;
    jobs[i].sampler = &greedy[i];
  }
  for (const absl::StatusOr<PrefillResult>& r : RunPrefillBatch(model, jobs)) {
    HAP_RETURN_IF_ERROR(r.status());
  }
  return MsBetween(t0, Clock::now());
}

}  // namespace

absl::StatusOr<double> WarmUpPrefill(const LlavaModel& model, const PruneRequest& prune,
                                     int prompts) {
  EncodeResult image;
  image.n_vis = model.config().num_visual_tokens();
  image.embeds.assign(static_cast<size_t>(image.n_vis) * model.config().text.hidden_size, 0.f);
  return WarmUpPrefillOver(model, image, prune, prompts);
}

namespace {

// A job of a batched pass, checked: its prompt's tokens (and, for Qwen2.5-VL, positions), its
// dims and pruner, its sampler as it was before the pass.
template <typename Prompt>
struct CheckedJob {
  size_t index = 0;
  Prompt prompt;
  ModelDims dims;
  std::unique_ptr<Pruner> pruner;
  Sampler sampler_before{SamplingParams{}};
};

absl::Status LeftItsPass() {
  return absl::CancelledError("prefill cancelled: the request left its batched pass");
}

const PromptTokens& TokensOf(const PromptTokens& prompt) { return prompt; }
const PromptTokens& TokensOf(const QwenPrompt& prompt) { return prompt.tokens; }

// RunPrefillBatch (and RunPrefill, a batch of one) for either family: `check` tokenizes a job
// into a CheckedJob and gives its dims (its error is the job's), and the job's pruner is made for
// them; `image` points a batch prompt at the job's image embeddings. Then one PrefillBatch over
// the checked jobs; where that pass fails with several jobs, each runs alone.
template <typename Model, typename Prompt, typename BatchPrompt>
std::vector<absl::StatusOr<PrefillResult>> PrefillBatchOf(
    const Model& model, const std::vector<PrefillJob>& jobs,
    const std::function<absl::Status(const PrefillJob&, CheckedJob<Prompt>*)>& check,
    const std::function<void(const PrefillJob&, BatchPrompt*)>& image) {
  const auto t0 = Clock::now();
  std::vector<absl::StatusOr<PrefillResult>> results(jobs.size());
  std::vector<CheckedJob<Prompt>> checked;
  for (size_t i = 0; i < jobs.size(); ++i) {
    CheckedJob<Prompt> c;
    c.index = i;
    absl::Status s = check(jobs[i], &c);
    if (s.ok()) {
      const PromptTokens& tokens = TokensOf(c.prompt);
      absl::StatusOr<std::unique_ptr<Pruner>> pruner =
          PrunerFor(jobs[i].prune, c.dims, static_cast<int>(tokens.ids.size()), tokens.n_vis);
      s = pruner.status();
      if (s.ok()) c.pruner = std::move(*pruner);
    }
    if (!s.ok()) {
      results[i] = s;
      continue;
    }
    if (jobs[i].sampler != nullptr) c.sampler_before = *jobs[i].sampler;
    checked.push_back(std::move(c));
  }
  if (checked.empty()) return results;
  std::vector<BatchPrompt> prompts(checked.size());
  for (size_t k = 0; k < checked.size(); ++k) {
    const PrefillJob& job = jobs[checked[k].index];
    BatchPrompt& p = prompts[k];
    p.prompt = &checked[k].prompt;
    image(job, &p);
    // Method "none" runs the plain engine path (no attention statistics are even computed), so
    // it is bit-identical to an engine without pruning.
    p.pruner = job.prune.method == "none" ? nullptr : checked[k].pruner.get();
    p.sampler = job.sampler;
    p.kv_reserve_rows = job.kv_reserve_rows;
    if (job.cancelled) p.cancelled = &job.cancelled;
  }
  absl::StatusOr<std::vector<PrefillOutput>> outs = model.PrefillBatch(prompts);
  if (!outs.ok()) {
    // Several jobs run again alone, so that one cannot fail the others; a job alone, or jobs
    // whose callers all cancelled, get the pass's error.
    const bool alone = checked.size() > 1 && !absl::IsCancelled(outs.status());
    for (const CheckedJob<Prompt>& c : checked) {
      const PrefillJob& job = jobs[c.index];
      if (!alone) {
        results[c.index] = outs.status();
        continue;
      }
      if (job.cancelled && job.cancelled()) {
        results[c.index] = LeftItsPass();
        continue;
      }
      if (job.sampler != nullptr) *job.sampler = c.sampler_before;
      results[c.index] =
          RunPrefill(model, *job.prompt, *job.encoded, job.prune, job.sampler, job.kv_reserve_rows);
    }
    return results;
  }
  for (size_t k = 0; k < checked.size(); ++k) {
    const CheckedJob<Prompt>& c = checked[k];
    const PrefillJob& job = jobs[c.index];
    if ((*outs)[k].cancelled) {
      results[c.index] = LeftItsPass();
      continue;
    }
    results[c.index] = ResultOf(std::move((*outs)[k]), c.dims, job.prune.method, job.encoded->n_vis,
                                *c.pruner, t0);
  }
  return results;
}

}  // namespace

std::vector<absl::StatusOr<PrefillResult>> RunPrefillBatch(const LlavaModel& model,
                                                           const std::vector<PrefillJob>& jobs) {
  return PrefillBatchOf<LlavaModel, PromptTokens, PrefillPrompt>(
      model, jobs,
      [&](const PrefillJob& job, CheckedJob<PromptTokens>* c) -> absl::Status {
        HAP_ASSIGN_OR_RETURN(c->prompt, model.Tokenize(*job.prompt, job.encoded->n_vis));
        c->dims = DimsOf(model.config());
        return absl::OkStatus();
      },
      [](const PrefillJob& job, PrefillPrompt* p) {
        if (job.encoded->embeds_in_backend != nullptr) {
          p->image_embeds_in_backend = job.encoded->embeds_in_backend.get();
        } else {
          p->image_embeds = &job.encoded->embeds;
        }
      });
}

std::vector<absl::StatusOr<PrefillResult>> RunPrefillBatch(const QwenModel& model,
                                                           const std::vector<PrefillJob>& jobs) {
  return PrefillBatchOf<QwenModel, QwenPrompt, QwenPrefillPrompt>(
      model, jobs,
      [&](const PrefillJob& job, CheckedJob<QwenPrompt>* c) -> absl::Status {
        HAP_ASSIGN_OR_RETURN(c->prompt, model.Tokenize(*job.prompt, job.encoded->grid));
        if (c->prompt.tokens.n_vis != job.encoded->n_vis) {
          return absl::InvalidArgumentError(
              absl::StrFormat("the image's grid gives %d visual tokens; %d embeddings came",
                              c->prompt.tokens.n_vis, job.encoded->n_vis));
        }
        c->dims = DimsOf(model.config(), job.encoded->n_vis);
        return absl::OkStatus();
      },
      [](const PrefillJob& job, QwenPrefillPrompt* p) { p->image_embeds = &job.encoded->embeds; });
}

namespace {

// RunPrefill of either family: a batch of one job.
template <typename Model>
absl::StatusOr<PrefillResult> RunOne(const Model& model, const PromptText& prompt,
                                     const EncodeResult& encoded, const PruneRequest& prune,
                                     Sampler* sampler, int kv_reserve_rows) {
  PrefillJob job;
  job.prompt = &prompt;
  job.encoded = &encoded;
  job.prune = prune;
  job.sampler = sampler;
  job.kv_reserve_rows = kv_reserve_rows;
  return std::move(RunPrefillBatch(model, {job})[0]);
}

}  // namespace

absl::StatusOr<PrefillResult> RunPrefill(const LlavaModel& model, const PromptText& prompt,
                                         const EncodeResult& encoded, const PruneRequest& prune,
                                         Sampler* sampler, int kv_reserve_rows) {
  return RunOne(model, prompt, encoded, prune, sampler, kv_reserve_rows);
}

absl::StatusOr<PrefillResult> RunPrefill(const QwenModel& model, const PromptText& prompt,
                                         const EncodeResult& encoded, const PruneRequest& prune,
                                         Sampler* sampler, int kv_reserve_rows) {
  return RunOne(model, prompt, encoded, prune, sampler, kv_reserve_rows);
}

absl::StatusOr<EncodeResult> EncodeImage(const QwenModel& model, std::string_view image_bytes,
                                         const PruneRequest& prune) {
  HAP_RETURN_IF_ERROR(RefuseVisionZip(prune));
  EncodeResult out;
  const auto t0 = Clock::now();
  HAP_ASSIGN_OR_RETURN(RgbImage image, DecodeImage(image_bytes, model.options().image_limits));
  out.image_width = image.width;
  out.image_height = image.height;
  HAP_ASSIGN_OR_RETURN(Qwen2VLPixels pixels, Qwen2VLPreprocess(image, model.image_processor()));
  const auto t1 = Clock::now();
  HAP_ASSIGN_OR_RETURN(out.embeds, model.ImageEmbeddings(pixels));
  out.grid = pixels.grid;
  out.n_vis = static_cast<int>(out.embeds.size() / model.text_config().hidden_size);
  out.preprocess_ms = MsBetween(t0, t1);
  out.encode_ms = MsBetween(t1, Clock::now());
  return out;
}

absl::StatusOr<ImageGrid> ImageGridOf(const QwenModel& model, ImageSize image) {
  const Qwen2VLImageProcessorConfig& p = model.image_processor();
  const int factor = p.patch_size * p.merge_size;
  int h = image.height, w = image.width;
  if (p.do_resize) {
    HAP_ASSIGN_OR_RETURN(ResizedSize size, SmartResize(h, w, factor, p.min_pixels, p.max_pixels));
    h = size.height, w = size.width;
  }
  return ImageGrid{1, h / factor * p.merge_size, w / factor * p.merge_size};
}

absl::StatusOr<int> VisualTokensOf(const QwenModel& model, std::string_view image_bytes) {
  HAP_ASSIGN_OR_RETURN(ImageSize size, ReadImageSize(image_bytes, model.options().image_limits));
  HAP_ASSIGN_OR_RETURN(ImageGrid grid, ImageGridOf(model, size));
  const int merge = model.image_processor().merge_size;
  return static_cast<int>(grid.patches() / (merge * merge));
}

absl::Status ValidateRequest(const QwenModel& model, const PromptText& prompt,
                             const PruneRequest& prune, int visual_tokens) {
  HAP_RETURN_IF_ERROR(RefuseVisionZip(prune));
  HAP_ASSIGN_OR_RETURN(std::vector<int32_t> ids, model.PromptIds(prompt, visual_tokens));
  PruneRequest req = prune;
  req.text_tokens = static_cast<int>(ids.size()) - 1;
  return MakePruner(req, DimsOf(model.config(), visual_tokens)).status();
}

ImageSize WarmUpImageSize(const QwenModel& model) {
  const Qwen2VLImageProcessorConfig& p = model.image_processor();
  const int side = 16 * p.patch_size * p.merge_size;
  return ImageSize{side, side};
}

absl::StatusOr<double> WarmUpEncode(const QwenModel& model, const PruneRequest& prune) {
  HAP_ASSIGN_OR_RETURN(std::string png, PatternPng(WarmUpImageSize(model).width));
  const auto t0 = Clock::now();
  HAP_RETURN_IF_ERROR(EncodeImage(model, png, prune).status());
  return MsBetween(t0, Clock::now());
}

absl::StatusOr<double> WarmUpPrefill(const QwenModel& model, const PruneRequest& prune,
                                     int prompts) {
  EncodeResult image;
  HAP_ASSIGN_OR_RETURN(image.grid, ImageGridOf(model, WarmUpImageSize(model)));
  const int merge = model.image_processor().merge_size;
  image.n_vis = static_cast<int>(image.grid.patches() / (merge * merge));
  image.embeds.assign(static_cast<size_t>(image.n_vis) * model.text_config().hidden_size, 0.f);
  return WarmUpPrefillOver(model, image, prune, prompts);
}

absl::StatusOr<GenerateResult> Generate(const LlavaModel& model, const GenerateRequest& request,
                                        const TokenSink& sink) {
  HAP_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  const auto t0 = Clock::now();
  // Reject a bad prompt or budget before spending time on the image.
  HAP_RETURN_IF_ERROR(ValidateRequest(model, request.prompt, request.prune));
  HAP_ASSIGN_OR_RETURN(EncodeResult encoded, EncodeImage(model, request.image_bytes, request.prune,
                                                         /*keep_in_backend=*/true));
  // On a device the cache keeps room for the answer, and the decode loop decodes from it.
  return DecodeAfterPrefill(model, request, encoded, t0, sink, [&](Sampler* sampler) {
    return RunPrefill(model, request.prompt, encoded, request.prune, sampler,
                      request.stop.max_new_tokens);
  });
}

absl::StatusOr<GenerateResult> Generate(const QwenModel& model, const GenerateRequest& request,
                                        const TokenSink& sink) {
  HAP_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  const auto t0 = Clock::now();
  // Reject a bad prompt or budget before spending time on the image (its size is in its header).
  HAP_ASSIGN_OR_RETURN(int visual_tokens, VisualTokensOf(model, request.image_bytes));
  HAP_RETURN_IF_ERROR(ValidateRequest(model, request.prompt, request.prune, visual_tokens));
  HAP_ASSIGN_OR_RETURN(EncodeResult encoded,
                       EncodeImage(model, request.image_bytes, request.prune));
  return DecodeAfterPrefill(model, request, encoded, t0, sink, [&](Sampler* sampler) {
    return RunPrefill(model, request.prompt, encoded, request.prune, sampler,
                      request.stop.max_new_tokens);
  });
}

}  // namespace hap
