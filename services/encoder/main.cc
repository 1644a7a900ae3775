// hap-encoder: the vision-encoder service (image bytes → visual embeddings).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "runtime/model/pipeline.h"
#include "services/encoder/encoder_service.h"
#include "services/server/model_loader.h"
#include "services/server/service_host.h"
#include "services/server/status.h"

namespace hap::svc {
namespace {

std::vector<OptionSpec> Specs() {
  std::vector<OptionSpec> specs = CommonOptionSpecs();
  specs.push_back(MaxImageBytesSpec());
  specs.push_back({"max-image-pixels", "HAP_MAX_IMAGE_PIXELS", "40000000",
                   "largest width*height accepted (RESOURCE_EXHAUSTED above)"});
  specs.push_back(AttentionDTypeSpec("the vision tower attention's"));
  return specs;
}

int Serve(ServiceHost& host, const Options& options, const CommonOptions& common) {
  EncoderConfig config;
  config.max_message_bytes = common.max_message_bytes;
  auto max_image = options.Int("max-image-bytes", 1, 1LL << 31);
  auto max_pixels = options.Int("max-image-pixels", 1, 1LL << 34);
  if (!max_image.ok()) return StartupFailure(host.name(), max_image.status());
  if (!max_pixels.ok()) return StartupFailure(host.name(), max_pixels.status());
  config.max_image_bytes = *max_image;

  std::unique_ptr<VisionLanguageModel> model;
  WorkerPool pool(common.max_concurrent, common.queue_length);
  host.state().Attach(&pool, nullptr);
  EncoderService service(&host.state(), &pool, config);
  // The request carries the whole image, so the receive limit must admit the largest one.
  const int max_receive = static_cast<int>(
      std::max<int64_t>(common.max_message_bytes, config.max_image_bytes + (64 << 10)));
  if (absl::Status s = host.Start(common, {&service}, max_receive); !s.ok()) {
    return StartupFailure(host.name(), s);
  }
  ModelOptions model_options;
  model_options.parts = ModelParts::kVision;  // vision tower + projector only
  model_options.image_limits.max_bytes = config.max_image_bytes;
  model_options.image_limits.max_pixels = *max_pixels;
  const absl::StatusOr<std::optional<DType>> attention_dtype =
      ParseAttentionDTypeFlagValue("--attention-dtype", options.Get("attention-dtype"));
  if (!attention_dtype.ok()) return StartupFailure(host.name(), attention_dtype.status());
  model_options.attention_dtype = *attention_dtype;
  auto loaded = LoadServiceModel(host.name(), common, model_options);
  if (!loaded.ok()) return host.Fail(loaded.status());
  model = std::move(*loaded);
  if (common.warm_up) {
    PruneRequest none;
    none.method = "none";
    absl::StatusOr<double> ms = model->WarmUpEncode(none);
    if (!ms.ok()) return host.Fail(Annotate(ms.status(), "warm-up request"));
    std::fprintf(stderr, "%s: warm-up request (one image) in %.1f ms\n", host.name().c_str(), *ms);
  }
  service.SetModel(model.get());
  host.SetServing();
  return host.WaitAndDrain(common.drain_timeout_ms);
}

}  // namespace
}  // namespace hap::svc

int main(int argc, char** argv) {
  return hap::svc::RunService("hap-encoder", argc, argv, hap::svc::Specs(), hap::svc::Serve);
}
