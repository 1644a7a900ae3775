// What every vision-language model family shares: the options a model loads with, the language
// model's side of a request (tokenizer, LlamaDecoder, decode steps sampled where the logits are)
// and the prefill's output. LlavaModel and QwenModel derive from LanguageModel and add their
// vision tower, image processing and prompt; the decode loop (runtime/model/generate.h) and the
// batching engine read only this interface.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/thread_pool.h"
#include "kernels/backend.h"
#include "runtime/image/image.h"
#include "runtime/io/config.h"
#include "runtime/io/weights.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/llama.h"
#include "runtime/model/row_sampling.h"
#include "runtime/model/sampler.h"
#include "runtime/text/llava_prompt.h"
#include "runtime/text/tokenizer.h"

namespace hap {

struct ModelOptions {
  int threads = 0;  // CPU threads (the kernels' pool); 0 = all cores
  // How long the pool's threads spin for the next op before sleeping (ThreadPool).
  int pool_spin_us = ThreadPool::kDefaultSpinUs;
  ModelParts parts = ModelParts::kAll;  // what this process loads (the services load one part)
  ImageLimits image_limits;
  int max_prompt_tokens = 0;  // 0 → the model's max_position_embeddings
  // The backend every op runs on; null = the CPU backend. It must outlive the model.
  const Backend* backend = nullptr;
  // What the prefill's KV cache (PrefillOutput::cache) holds: F32, or BF16 rows rounded from
  // the F32 ones (half the memory and transfer). The prefill's own attention reads the F32
  // rows, so its logits do not depend on it; the decode steps read the cache as stored.
  DType kv_dtype = DType::kF32;
  // The operand type of attention in the prefill and the vision tower (AttentionArgs::operands):
  // F32, or BF16/F16 rounded operands with F32 accumulation. Unset: the type of the attention
  // layers' weights where the backend's fast path is narrow attention (BackendCaps::
  // narrow_attention: the CUDA backend, on tensor cores), F32 otherwise (the CPU backend, whose
  // F32 attention matches transformers in F32). Decode attention reads the cache as stored.
  std::optional<DType> attention_dtype;
  // Decode steps captured as graphs and replayed where the backend can (BackendCaps::graphs: a
  // GPU's CUDA graphs, one per batch size; LlamaDecoder::DecodeBatchInto). Off: every step
  // enqueues its ops one by one. The tokens are the same either way.
  bool decode_graphs = true;
  // A prefill on a device keeps its KV cache in memory another process on the device can map
  // (DeviceKv::Create's shareable), so hap-prefill can hand it to hap-decode on the same GPU
  // without a copy (--kv-handover).
  bool shareable_kv = false;
};

// The attention dtype a command-line flag names (--attention-dtype, HAP_ATTENTION_DTYPE): "auto"
// (unset: ModelOptions::attention_dtype's default), "f32", "bf16" or "f16". InvalidArgument naming
// `flag`, the value and the accepted names otherwise.
absl::StatusOr<std::optional<DType>> ParseAttentionDTypeFlagValue(std::string_view flag,
                                                                  std::string_view value);

// ModelOptions::attention_dtype for attention layers whose projections are stored in `weights`
// on `backend`.
DType AttentionOperands(const ModelOptions& options, DType weights, const Backend& backend);

// What every model family's Load does first: NotFound unless `dir` is a directory,
// InvalidArgument for an unsupported kv_dtype; then the CPU pool is sized from `options`.
absl::Status BeginModelLoad(const std::string& dir, const ModelOptions& options);
// FailedPrecondition naming the part when a process that loaded `loaded` of `dir` needs `part`.
absl::Status NeedModelPart(ModelParts loaded, ModelParts part, const std::string& dir);

// A request's prompt: a question the family's template wraps (LLaVA's "USER: <image>\n{question}
// ASSISTANT:", Qwen2.5-VL's chat template with the image first), or a whole prompt a chat
// template already rendered, holding the family's image placeholder exactly once ("<image>";
// "<|image_pad|>"). Converts implicitly from a question.
struct PromptText {
  PromptText() = default;
  PromptText(std::string_view question) : text(question) {}    // NOLINT(runtime/explicit)
  PromptText(const std::string& question) : text(question) {}  // NOLINT(runtime/explicit)
  PromptText(const char* question) : text(question) {}         // NOLINT(runtime/explicit)
  static PromptText Rendered(std::string_view text) {
    PromptText p(text);
    p.rendered = true;
    return p;
  }

  std::string_view text;  // not owned
  bool rendered = false;
};

struct PrefillOutput {
  // The KV cache, in ModelOptions::kv_dtype: on the CPU backend `cache`, in host memory; on a
  // device backend `device_cache`, in the backend's memory (`cache` stays empty), which the KV
  // transfer reads chunk by chunk and a decode in the same process decodes from. kv() is the
  // one that holds it; what reads LayerKv vectors on a device takes device_cache->ToHost().
  KvCache cache;
  std::unique_ptr<DeviceKv> device_cache;
  KvStore& kv() { return device_cache ? *device_cache : static_cast<KvStore&>(cache); }
  const KvStore& kv() const {
    return device_cache ? *device_cache : static_cast<const KvStore&>(cache);
  }
  // Without a sampler: the logits F32 [vocab] after the last prompt token. With one: empty.
  std::vector<float> logits;
  // With a sampler: the first token it drew, and how the row was sampled (one row counted).
  int32_t first_token = -1;
  RowSamplingCounts sampling;
  PrefillTrace trace;
  int prompt_tokens = 0;  // unpruned prompt length
  // The prompt left its batched pass because its caller cancelled (PrefillSequence::cancelled):
  // nothing above is finished.
  bool cancelled = false;
};

// An empty PrefillOutput for `decoder`'s prompt of `prompt_tokens` on `backend`: a host cache on
// the CPU backend, a DeviceKv with room for kv_reserve_rows more rows on a device (`shareable`:
// DeviceKv::Create's).
absl::StatusOr<PrefillOutput> EmptyPrefillOutput(const Backend& backend,
                                                 const LlamaDecoder& decoder, DType kv_dtype,
                                                 int prompt_tokens, int kv_reserve_rows,
                                                 bool shareable = false);

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  LanguageModel(const LanguageModel&) = delete;
  LanguageModel& operator=(const LanguageModel&) = delete;

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // The decoder's view of the language model (EOS, context, widths).
  const TextConfig& text_config() const { return text_config_; }
  const ModelOptions& options() const { return options_; }
  const Backend& backend() const {
    return options_.backend != nullptr ? *options_.backend : CpuBackend();
  }
  const std::string& dir() const { return dir_; }
  // The longest prompt a request may have: ModelOptions::max_prompt_tokens within the context.
  int max_prompt_tokens() const;
  // One line for a service's log: the family, the shapes and the weights' bytes (as stored,
  // converted to F32, on the device).
  virtual std::string Summary() const = 0;

  // Appends `token` to the cache and returns the next logits F32 [vocab].
  absl::StatusOr<std::vector<float>> DecodeStep(int32_t token, KvStore* cache) const;
  // One step for several sequences (LlamaDecoder::DecodeBatch): F32 [b, vocab].
  absl::StatusOr<std::vector<float>> DecodeBatch(const std::vector<int32_t>& tokens,
                                                 const std::vector<KvStore*>& caches) const;
  // One step for several sequences that returns each one's next token, drawn by samplers[i]
  // exactly as samplers[i]->Sample(its row of logits) would. The logits stay where the backend
  // made them: on a device only the greedy rows' ids or the other rows' top candidates come back
  // (SampleRows, runtime/model/row_sampling.h; `counts` says which); the CPU backend samples its
  // host logits in place (counted in `host`). Errors as DecodeBatch. `workspace` (on the model's
  // backend; may be null) is what a caller decoding step after step keeps, so that no step
  // allocates once warm and each uploads once (DecodeWorkspace).
  absl::StatusOr<std::vector<int32_t>> DecodeBatchSampled(
      const std::vector<int32_t>& tokens, const std::vector<KvStore*>& caches,
      const std::vector<Sampler*>& samplers, RowSamplingCounts* counts = nullptr,
      DecodeWorkspace* workspace = nullptr) const;
  // LlamaDecoder::CheckCanDecode (FailedPrecondition too when the language part is not loaded).
  absl::Status CheckCanDecode(const KvStore& cache) const;
  // Whether decode steps run as captured graphs (LlamaDecoder::captures_decode_steps); false when
  // the language part is not loaded.
  bool captures_decode_steps() const {
    return decoder_ != nullptr && decoder_->captures_decode_steps();
  }
  // Prefill runs planned so far rather than found among the kept plans
  // (LlamaDecoder::prefill_plans_made; 0 when the language part is not loaded).
  int64_t prefill_plans_made() const {
    return decoder_ != nullptr ? decoder_->prefill_plans_made() : 0;
  }

 protected:
  LanguageModel() = default;
  // FailedPrecondition naming the part when this process did not load it.
  absl::Status NeedPart(ModelParts part) const;
  // Rows of logits F32 [rows, vocab] in the backend's memory, each drawn by its sampler: through
  // SampleRows on a device, by Sample() in place on the CPU backend. Sets *counts.
  absl::StatusOr<std::vector<int32_t>> SampleBackendLogits(const float* logits, int rows, int vocab,
                                                           const std::vector<Sampler*>& samplers,
                                                           RowSamplingCounts* counts) const;
  // The prefill's output from the decoder's logits: copied to the host without a sampler, the
  // first token drawn where they are with one.
  absl::Status FinishPrefill(const BackendArray<float>& logits, Sampler* sampler,
                             PrefillOutput* out) const;
  // One prompt's decoder input (a family's PrefillBatch): the token embeddings of `tokens` with
  // the image's rows F32 [tokens.n_vis, hidden] at `image` (in the backend's memory where
  // image_in_backend, else on the host) over the image tokens, whose own ids may lie outside the
  // embedding table; spliced in the backend's memory where splice_in_backend, else on the host.
  // Positions 0..n−1, into `out`'s empty cache (room for kv_reserve_rows more rows on a device)
  // and `logits`; `ids` holds the ids the sequence points to.
  absl::Status PromptSequence(const PromptTokens& tokens, const float* image, size_t image_values,
                              bool image_in_backend, bool splice_in_backend, Pruner* pruner,
                              int kv_reserve_rows, std::vector<int32_t>* ids, PrefillOutput* out,
                              BackendArray<float>* logits, PrefillSequence* seq) const;
  // A family's PrefillBatch: `input(prompts[i], &ids, &out, &logits, &seq)` builds each prompt's
  // decoder input into its empty output (an error names the prompt when there are several), then
  // the decoder's one pass over them all (LlamaDecoder::PrefillBatchInto), then each output
  // finished from its logits with the prompt's `sampler` (may be null; FinishPrefill), except
  // those of prompts that left the pass (`cancelled`).
  template <typename Prompt, typename Input>
  absl::StatusOr<std::vector<PrefillOutput>> PrefillBatchOf(const std::vector<Prompt>& prompts,
                                                            const Input& input) const {
    const size_t b = prompts.size();
    std::vector<std::vector<int32_t>> ids(b);  // what each sequence's ids point to
    std::vector<PrefillOutput> outs(b);
    std::vector<BackendArray<float>> logits;  // F32 [1, vocab] each
    logits.reserve(b);
    std::vector<PrefillSequence> seqs(b);
    for (size_t i = 0; i < b; ++i) {
      logits.emplace_back(backend());
      absl::Status s = input(prompts[i], &ids[i], &outs[i], &logits[i], &seqs[i]);
      if (!s.ok() && b > 1) s = PromptError(i, b, s);
      if (!s.ok()) return s;
      seqs[i].cancelled = prompts[i].cancelled;
    }
    if (absl::Status s = decoder_->PrefillBatchInto(seqs); !s.ok()) return s;
    for (size_t i = 0; i < b; ++i) {
      outs[i].cancelled = seqs[i].left_pass;
      if (outs[i].cancelled) continue;
      if (absl::Status s = FinishPrefill(logits[i], prompts[i].sampler, &outs[i]); !s.ok()) {
        return s;
      }
    }
    return outs;
  }

  std::string dir_;
  ModelOptions options_;
  TextConfig text_config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<LlamaDecoder> decoder_;  // null when the language part is not loaded
};

}  // namespace hap
