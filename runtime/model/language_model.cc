#include "runtime/model/language_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/string_view_compat.h"

namespace hap {

absl::StatusOr<std::optional<DType>> ParseAttentionDTypeFlagValue(std::string_view flag,
                                                                  std::string_view value) {
  if (value == "auto") return std::optional<DType>();
  if (value == "f32") return DType::kF32;
  if (value == "bf16") return DType::kBF16;
  if (value == "f16") return DType::kF16;
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(flag), " '", std::string(value), "' is not auto, f32, bf16 or f16"));
}

DType AttentionOperands(const ModelOptions& options, DType weights, const Backend& backend) {
  if (options.attention_dtype.has_value()) return *options.attention_dtype;
  return backend.caps().narrow_attention && weights != DType::kF32 ? weights : DType::kF32;
}

absl::Status BeginModelLoad(const std::string& dir, const ModelOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec) || ec) {
    return absl::NotFoundError(absl::StrCat("model directory '", dir, "' does not exist"));
  }
  HAP_RETURN_IF_ERROR(CheckKvDType(options.kv_dtype));
  ConfigureCpuBackend(options.threads, options.pool_spin_us);
  return absl::OkStatus();
}

absl::Status NeedModelPart(ModelParts loaded, ModelParts part, const std::string& dir) {
  if (HasPart(loaded, part)) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("this process loaded only the ", AsAbsl(ModelPartsName(loaded)), " part of ",
                   dir, "; the ", AsAbsl(ModelPartsName(part)), " part is not loaded"));
}

absl::StatusOr<PrefillOutput> EmptyPrefillOutput(const Backend& backend,
                                                 const LlamaDecoder& decoder, DType kv_dtype,
                                                 int prompt_tokens, int kv_reserve_rows,
                                                 bool shareable) {
  PrefillOutput out;
  out.prompt_tokens = prompt_tokens;
  HAP_RETURN_IF_ERROR(out.cache.SetDType(kv_dtype));
  if (backend.caps().host_memory) {
    out.cache.kv_dim = decoder.kv_dim();
    out.cache.layers.resize(decoder.n_layers());
  } else {
    HAP_ASSIGN_OR_RETURN(out.device_cache,
                         DeviceKv::Create(backend, decoder.n_layers(), decoder.kv_dim(), kv_dtype,
                                          kv_reserve_rows, shareable));
  }
  return out;
}

int LanguageModel::max_prompt_tokens() const {
  const int ctx = text_config_.max_position_embeddings;
  return options_.max_prompt_tokens > 0 ? std::min(options_.max_prompt_tokens, ctx) : ctx;
}

absl::Status LanguageModel::NeedPart(ModelParts part) const {
  return NeedModelPart(options_.parts, part, dir_);
}

absl::Status LanguageModel::FinishPrefill(const BackendArray<float>& logits, Sampler* sampler,
                                          PrefillOutput* out) const {
  if (sampler == nullptr) {
    out->logits.resize(logits.size());
    return logits.CopyTo(out->logits.data());
  }
  HAP_ASSIGN_OR_RETURN(std::vector<int32_t> first,
                       SampleBackendLogits(logits.data(), 1, static_cast<int>(logits.size()),
                                          {sampler}, &out->sampling));
  out->first_token = first[0];
  return absl::OkStatus();
}

absl::Status LanguageModel::PromptSequence(const PromptTokens& tokens, const float* image,
                                           size_t image_values, bool image_in_backend,
                                           bool splice_in_backend, Pruner* pruner,
                                           int kv_reserve_rows, std::vector<int32_t>* ids,
                                           PrefillOutput* out, BackendArray<float>* logits,
                                           PrefillSequence* seq) const {
  HAP_RETURN_IF_ERROR(NeedPart(ModelParts::kLanguage));
  const int d = text_config_.hidden_size;
  if (image_values != static_cast<size_t>(tokens.n_vis) * d) {
    return absl::InvalidArgumentError(
        absl::StrFormat("image embeddings hold %d values, expected %d visual tokens x %d",
                        image_values, tokens.n_vis, d));
  }
  *ids = tokens.ids;
  std::fill(ids->begin() + tokens.vis_begin, ids->begin() + tokens.vis_begin + tokens.n_vis, 0);
  if (splice_in_backend) {
    seq->ids = ids;
    seq->image_embeds = image;
    seq->image_in_backend = image_in_backend;
  } else {
    HAP_ASSIGN_OR_RETURN(seq->x, decoder_->Embed(*ids));
    float* rows = seq->x.data() + static_cast<int64_t>(tokens.vis_begin) * d;
    if (image_in_backend) {
      HAP_RETURN_IF_ERROR(backend().CopyToHost(rows, image, image_values * sizeof(float)));
    } else {
      std::memcpy(rows, image, image_values * sizeof(float));
    }
  }
  seq->positions.resize(ids->size());
  for (size_t i = 0; i < ids->size(); ++i) seq->positions[i] = static_cast<int32_t>(i);
  seq->vis_begin = tokens.vis_begin;
  seq->n_vis = tokens.n_vis;
  seq->pruner = pruner;
  HAP_ASSIGN_OR_RETURN(*out, EmptyPrefillOutput(backend(), *decoder_, options_.kv_dtype,
                                                static_cast<int>(ids->size()), kv_reserve_rows,
                                                options_.shareable_kv));
  seq->cache = &out->kv();
  seq->trace = &out->trace;
  seq->logits = logits;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> LanguageModel::DecodeStep(int32_t token, KvStore* cache) const {
  HAP_RETURN_IF_ERROR(NeedPart(ModelParts::kLanguage));
  return decoder_->DecodeStep(token, cache);
}

absl::StatusOr<std::vector<float>> LanguageModel::DecodeBatch(
    const std::vector<int32_t>& tokens, const std::vector<KvStore*>& caches) const {
  HAP_RETURN_IF_ERROR(NeedPart(ModelParts::kLanguage));
  return decoder_->DecodeBatch(tokens, caches);
}

absl::StatusOr<std::vector<int32_t>> LanguageModel::DecodeBatchSampled(
    const std::vector<int32_t>& tokens, const std::vector<KvStore*>& caches,
    const std::vector<Sampler*>& samplers, RowSamplingCounts* counts,
    DecodeWorkspace* workspace) const {
  HAP_RETURN_IF_ERROR(NeedPart(ModelParts::kLanguage));
  if (samplers.size() != tokens.size() ||
      std::find(samplers.begin(), samplers.end(), nullptr) != samplers.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("decode batch: %d tokens for %d samplers (none may be null)", tokens.size(),
                        samplers.size()));
  }
  std::unique_ptr<DecodeWorkspace> local;
  if (workspace == nullptr) {
    local = std::make_unique<DecodeWorkspace>(backend());
    workspace = local.get();
  }
  HAP_RETURN_IF_ERROR(decoder_->DecodeBatchInto(tokens, caches, workspace));
  const BackendArray<float>& logits = workspace->logits();  // F32 [b, vocab]
  const int b = static_cast<int>(tokens.size());
  const int vocab = static_cast<int>(logits.size() / tokens.size());
  return SampleBackendLogits(logits.data(), b, vocab, samplers, counts);
}

absl::StatusOr<std::vector<int32_t>> LanguageModel::SampleBackendLogits(
    const float* logits, int rows, int vocab, const std::vector<Sampler*>& samplers,
    RowSamplingCounts* counts) const {
  RowSamplingCounts local;
  if (counts == nullptr) counts = &local;
  *counts = RowSamplingCounts{};
  if (!backend().caps().host_memory) {
    return SampleRows(backend(), logits, rows, vocab, samplers, counts);
  }
  std::vector<int32_t> next(rows);
  for (int i = 0; i < rows; ++i) {
    next[i] = samplers[i]->Sample(logits + static_cast<int64_t>(i) * vocab, vocab);
  }
  counts->host = rows;
  return next;
}

absl::Status LanguageModel::CheckCanDecode(const KvStore& cache) const {
  HAP_RETURN_IF_ERROR(NeedPart(ModelParts::kLanguage));
  return decoder_->CheckCanDecode(cache);
}

}  // namespace hap
