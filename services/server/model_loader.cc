#include "services/server/model_loader.h"

#include <cstdio>

#include "base/timer.h"
#include "runtime/device/device_backend.h"
#include "services/server/status.h"
#include "telemetry/metrics.h"

namespace hap::svc {

absl::StatusOr<std::unique_ptr<LlavaModel>> LoadServiceModel(const std::string& service,
                                                             const CommonOptions& common,
                                                             ModelOptions model_options) {
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
  auto model = LlavaModel::Load(common.model_dir, model_options);
  if (!model.ok()) return Annotate(model.status(), "loading model " + common.model_dir);
  const double ms = MsSince(t0);
  const LlavaConfig& cfg = (*model)->config();
  const LlavaWeights& w = (*model)->weights();
  std::fprintf(stderr,
               "%s: loaded the %s part of %s on %s in %.0f ms (%d decoder layers, hidden %d, %d "
               "visual tokens; %.1f MiB of weights as stored, %.1f MiB converted to F32, %.1f MiB "
               "on the device)\n",
               service.c_str(), std::string(ModelPartsName(w.parts())).c_str(),
               common.model_dir.c_str(), std::string(backend->name()).c_str(), ms,
               cfg.text.num_hidden_layers, cfg.text.hidden_size, cfg.num_visual_tokens(),
               w.stored_bytes() / 1048576.0, w.converted_bytes() / 1048576.0,
               (*model)->placed_weights().device_bytes() / 1048576.0);
  return model;
}

}  // namespace hap::svc
