// The front door's request check for the fuzz targets: a real PrefillService (hap-prefill's
// defaults: method hap, retain 33.3%, 16 MiB images) holding the default model's language part,
// serving, with peer addresses it never calls. Check() is what every Generate call passes first.
#pragma once

#include <memory>

#include "runtime/model/vision_language_model.h"
#include "services/prefill/prefill_service.h"
#include "services/server/server_state.h"
#include "tests/fuzz/fuzz_util.h"

namespace hap::fuzz {

struct FrontDoor {
  svc::ServerState state{"hap-prefill"};
  std::unique_ptr<VisionLanguageModel> model;
  std::unique_ptr<svc::PrefillService> service;
};

inline FrontDoor& TheFrontDoor() {
  static FrontDoor* door = [] {
    auto* d = new FrontDoor;
    ModelOptions options;
    options.threads = 1;
    options.parts = ModelParts::kLanguage;  // as hap-prefill loads it
    auto model = VisionLanguageModel::Load(SourceDir() + "/models/scenes-llava", options);
    HAP_FUZZ_CHECK(model.ok(), "%s", model.status().ToString().c_str());
    d->model = std::move(*model);
    svc::PrefillConfig config;
    config.encoder_addresses = {"127.0.0.1:1"};
    config.decode_addresses = {"127.0.0.1:1"};
    config.default_pruning.set_method("hap");
    config.default_pruning.set_retain("33.3%");
    d->service = std::make_unique<svc::PrefillService>(&d->state, nullptr, nullptr, config);
    d->service->SetModel(d->model.get());
    d->state.SetReady();
    return d;
  }();
  return *door;
}

}  // namespace hap::fuzz
