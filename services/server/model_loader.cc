#include "services/server/model_loader.h"

#include <cstdio>

#include "base/status_macros.h"
#include "base/timer.h"
#include "runtime/device/device_backend.h"
#include "runtime/io/qwen_config.h"
#include "runtime/model/qwen_model.h"
#include "services/server/status.h"
#include "telemetry/metrics.h"

namespace hap::svc {

namespace {

// Sets the shared options, loads with `load` and logs the model's summary.
template <typename Model>
absl::StatusOr<std::unique_ptr<Model>> LoadTimed(
    const std::string& service, const CommonOptions& common, ModelOptions model_options,
    absl::StatusOr<std::unique_ptr<Model>> (*load)(const std::string&, const ModelOptions&)) {
  model_options.threads = common.threads;
  model_options.pool_spin_us = common.pool_spin_us;
  if (model_options.backend == nullptr) {
    absl::StatusOr<const Backend*> backend = BackendForDevice(common.device);
    if (!backend.ok()) return backend.status();
    model_options.backend = *backend;
  }
  const Backend* backend = model_options.backend;
  telemetry::Registry::Default().AddCallbackGauge(
      "hap_device_memory_bytes",
      "Device memory this process holds: weights, activations, KV blocks (0 on the CPU backend).",
      [backend] { return static_cast<double>(backend->DeviceBytesInUse()); });
  const auto t0 = Clock::now();
  auto model = load(common.model_dir, model_options);
  if (!model.ok()) return Annotate(model.status(), "loading model " + common.model_dir);
  std::fprintf(stderr, "%s: loaded the %s part of %s on %s in %.0f ms (%s)\n", service.c_str(),
               std::string(ModelPartsName(model_options.parts)).c_str(), common.model_dir.c_str(),
               std::string(backend->name()).c_str(), MsSince(t0), (*model)->Summary().c_str());
  return model;
}

}  // namespace

absl::StatusOr<std::unique_ptr<VisionLanguageModel>> LoadServiceModel(const std::string& service,
                                                                      const CommonOptions& common,
                                                                      ModelOptions model_options) {
  return LoadTimed<VisionLanguageModel>(service, common, std::move(model_options),
                                        &VisionLanguageModel::Load);
}

absl::StatusOr<std::unique_ptr<LanguageModel>> LoadServiceLanguageModel(
    const std::string& service, const CommonOptions& common, ModelOptions model_options) {
  if (IsQwen25VLDirectory(common.model_dir)) {
    HAP_ASSIGN_OR_RETURN(
        std::unique_ptr<QwenModel> qwen,
        LoadTimed<QwenModel>(service, common, std::move(model_options), &QwenModel::Load));
    return std::unique_ptr<LanguageModel>(std::move(qwen));
  }
  HAP_ASSIGN_OR_RETURN(
      std::unique_ptr<LlavaModel> llava,
      LoadTimed<LlavaModel>(service, common, std::move(model_options), &LlavaModel::Load));
  return std::unique_ptr<LanguageModel>(std::move(llava));
}

}  // namespace hap::svc
