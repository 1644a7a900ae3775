// hap-decode: the decode service. Receives compacted KV caches from hap-prefill and generates.
#include <string>
#include <vector>

#include "services/common/model_loader.h"
#include "services/common/service_host.h"
#include "services/decode/decode_service.h"

namespace hap::svc {
namespace {

std::vector<OptionSpec> Specs() {
  std::vector<OptionSpec> specs = CommonOptionSpecs();
  specs.push_back({"kv-lease-ms", "HAP_KV_LEASE_MS", "30000",
                   "a KV transfer must complete this long after its header, or it is dropped"});
  specs.push_back({"max-kv-bytes", "HAP_MAX_KV_BYTES", "0",
                   "KV cache bytes held at once; 0 = unlimited (RESOURCE_EXHAUSTED above)"});
  return specs;
}

int Main(int argc, char** argv) {
  ServiceHost host("hap-decode");
  Options options;
  CommonOptions common;
  if (int exit_code = host.ParseArgs(argc, argv, Specs(), &options, &common); exit_code >= 0) {
    return exit_code;
  }
  auto lease = options.Int("kv-lease-ms", 1, 3600 * 1000);
  auto max_kv = options.Int("max-kv-bytes", 0, int64_t{1} << 50);
  if (!lease.ok()) return StartupFailure(host.name(), lease.status());
  if (!max_kv.ok()) return StartupFailure(host.name(), max_kv.status());
  DecodeConfig config;
  config.lease_ms = *lease;

  std::unique_ptr<LlavaModel> model;
  WorkerPool pool(common.max_concurrent, common.queue_length);
  KvRegistry kv(*max_kv);
  host.state().Attach(&pool, &kv);
  DecodeService service(&host.state(), &pool, &kv, config);
  if (absl::Status s = host.Start(common, {&service}, common.max_message_bytes); !s.ok()) {
    return StartupFailure(host.name(), s);
  }
  ModelOptions model_options;
  model_options.parts = ModelParts::kLanguage;
  auto loaded = LoadServiceModel(host.name(), common, model_options);
  if (!loaded.ok()) return host.Fail(loaded.status());
  model = std::move(*loaded);
  // One engine thread batches the decode steps of every call; at most --max-concurrent
  // sequences share a step (admission already keeps the rest waiting).
  DecodeEngineOptions engine_options;
  engine_options.max_batch = common.max_concurrent;
  auto engine = std::make_unique<DecodeEngine>(*model, engine_options);
  service.SetModel(model.get(), engine.get());
  host.SetServing();
  return host.WaitAndDrain(common.drain_timeout_ms);
}

}  // namespace
}  // namespace hap::svc

int main(int argc, char** argv) { return hap::svc::Main(argc, argv); }
