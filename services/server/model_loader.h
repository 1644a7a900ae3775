// Loads the service's model with the options every service shares and prints how long it took.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/model/language_model.h"
#include "runtime/model/vision_language_model.h"
#include "services/server/options.h"

namespace hap::svc {

// The model of whichever family the directory holds (LLaVA or Qwen2.5-VL), with its pipeline:
// what the encoder and prefill services serve. `model_options.threads` is taken from `common`;
// the rest (image and prompt limits) from the caller.
absl::StatusOr<std::unique_ptr<VisionLanguageModel>> LoadServiceModel(const std::string& service,
                                                                      const CommonOptions& common,
                                                                      ModelOptions model_options);
// The language model of whichever family the directory holds (LLaVA or Qwen2.5-VL): what the
// decode service, which reads only the KV cache and the decoder, serves.
absl::StatusOr<std::unique_ptr<LanguageModel>> LoadServiceLanguageModel(const std::string& service,
                                                                        const CommonOptions& common,
                                                                        ModelOptions model_options);

}  // namespace hap::svc
