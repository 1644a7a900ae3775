#include "services/common/model_loader.h"

#include <chrono>
#include <cstdio>

#include "services/common/status.h"

namespace hap::svc {

absl::StatusOr<std::unique_ptr<LlavaModel>> LoadServiceModel(const std::string& service,
                                                             const CommonOptions& common,
                                                             ModelOptions model_options) {
  model_options.threads = common.threads;
  const auto t0 = std::chrono::steady_clock::now();
  auto model = LlavaModel::Load(common.model_dir, model_options);
  if (!model.ok()) return Annotate(model.status(), "loading model " + common.model_dir);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const LlavaConfig& cfg = (*model)->config();
  std::fprintf(stderr,
               "%s: loaded %s in %.0f ms (%d decoder layers, hidden %d, %d visual tokens)\n",
               service.c_str(), common.model_dir.c_str(), ms, cfg.text.num_hidden_layers,
               cfg.text.hidden_size, cfg.num_visual_tokens());
  return model;
}

}  // namespace hap::svc
