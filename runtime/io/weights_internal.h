// Pieces shared by the LLaVA and Qwen2.5-VL weight loaders. Internal to runtime/io.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/weights.h"

namespace hap::io_internal {

// model_dir's checkpoint under `canonical` names, checked against the `expected` tensors of the
// parts loaded: tensors named <prefix>* are `prefixed_part`'s, the rest the other part's.
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenCheckpoint(
    const std::string& model_dir, const Checkpoint::CanonicalName& canonical,
    const std::vector<ExpectedTensor>& expected, ModelParts parts, const std::string& prefix,
    ModelParts prefixed_part);

// The LLaMA-style decoder under `prefix` (<prefix>embed_tokens.weight, <prefix>norm.weight,
// <prefix>layers.N.*) with the output head `lm_head`, or the embeddings where they are tied.
// Qwen2 layers add the q, k and v biases (qkv_bias).
TextWeights ReadTextWeights(Checkpoint& c, const std::string& prefix, const std::string& lm_head,
                            int num_layers, bool tie_word_embeddings, bool qkv_bias);

}  // namespace hap::io_internal
