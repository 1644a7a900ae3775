// hap-decode: the decode service. Receives compacted KV caches from hap-prefill and generates.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/engine/decode_engine.h"
#include "runtime/engine/kv_block_pool.h"
#include "runtime/model/kv_cache.h"
#include "services/decode/decode_service.h"
#include "services/server/gpu_budget.h"
#include "services/server/model_loader.h"
#include "services/server/service_host.h"
#include "services/server/service_metrics.h"
#include "services/server/status.h"
#include "telemetry/metrics.h"

namespace hap::svc {
namespace {

// The memory this process may use: the machine's, or the container's limit when lower (cgroup
// v2 memory.max, or v1 memory.limit_in_bytes).
int64_t MemoryLimitBytes() {
  int64_t limit = int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGE_SIZE);
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream f(path);
    int64_t v = 0;
    if (f >> v && v > 0 && v < limit) limit = v;  // "max" (no limit) does not parse
  }
  return limit;
}

std::vector<OptionSpec> Specs() {
  std::vector<OptionSpec> specs = CommonOptionSpecs();
  specs.push_back({"kv-lease-ms", "HAP_KV_LEASE_MS", "30000",
                   "a KV transfer must complete this long after its header, or it is dropped"});
  specs.push_back(MaxKvBytesSpec());
  specs.push_back({"kv-pool-bytes", "HAP_KV_POOL_BYTES", "0",
                   "the paged KV pool's size; 0 = a quarter of the memory (the container's limit "
                   "when there is one). A call "
                   "waits for blocks, or gets RESOURCE_EXHAUSTED if it needs more than all"});
  specs.push_back(
      GpuMemorySpec("the KV pool takes what the weights, a warm-up step's workspace and the CUDA "
                    "runtime leave of it. Empty = no budget (--kv-pool-bytes sizes the pool)"));
  specs.push_back({"kv-block-rows", "HAP_KV_BLOCK_ROWS", "16", "token rows per KV block"});
  specs.push_back({"kv-dtype", "HAP_KV_DTYPE", "f32",
                   "KV cache element type in the pool: f32, or bf16 (half the memory)"});
  specs.push_back({"decode-graphs", "HAP_DECODE_GRAPHS", "on",
                   "with --device cuda, on: each decode step runs as a CUDA graph captured once "
                   "per batch size (one launch instead of one per op; the same tokens); off: op "
                   "by op"});
  return specs;
}

int Serve(ServiceHost& host, const Options& options, const CommonOptions& common) {
  auto lease = options.Int("kv-lease-ms", 1, 3600 * 1000);
  auto max_kv = options.Int("max-kv-bytes", 0, int64_t{1} << 50);
  auto pool_bytes = options.Int("kv-pool-bytes", 0, int64_t{1} << 50);
  auto block_rows = options.Int("kv-block-rows", 1, 4096);
  if (!lease.ok()) return StartupFailure(host.name(), lease.status());
  if (!max_kv.ok()) return StartupFailure(host.name(), max_kv.status());
  if (!pool_bytes.ok()) return StartupFailure(host.name(), pool_bytes.status());
  if (!block_rows.ok()) return StartupFailure(host.name(), block_rows.status());
  const absl::StatusOr<bool> decode_graphs = options.OnOff("decode-graphs");
  if (!decode_graphs.ok()) return StartupFailure(host.name(), decode_graphs.status());
  const std::string kv_dtype_name = options.Get("kv-dtype");
  const absl::StatusOr<DType> parsed_kv_dtype = ParseKvDTypeFlagValue("--kv-dtype", kv_dtype_name);
  if (!parsed_kv_dtype.ok()) return StartupFailure(host.name(), parsed_kv_dtype.status());
  const DType kv_dtype = *parsed_kv_dtype;
  int64_t kv_pool_bytes = *pool_bytes > 0 ? *pool_bytes : MemoryLimitBytes() / 4;
  const absl::StatusOr<int64_t> parsed_budget = GpuBudgetFromOptions(options, common);
  if (!parsed_budget.ok()) return StartupFailure(host.name(), parsed_budget.status());
  const int64_t gpu_budget = *parsed_budget;
  DecodeConfig config;
  config.lease_ms = *lease;

  std::unique_ptr<LanguageModel> model;
  WorkerPool pool(common.max_concurrent, common.queue_length);
  KvRegistry kv(*max_kv);
  host.state().Attach(&pool, &kv);
  DecodeService service(&host.state(), &pool, &kv, config);
  if (absl::Status s = host.Start(common, {&service}, common.max_message_bytes); !s.ok()) {
    return StartupFailure(host.name(), s);
  }
  ModelOptions model_options;
  model_options.parts = ModelParts::kLanguage;
  model_options.decode_graphs = *decode_graphs;
  auto loaded = LoadServiceLanguageModel(host.name(), common, model_options);
  if (!loaded.ok()) return host.Fail(loaded.status());
  model = std::move(*loaded);
  // One engine thread batches the decode steps of every call; at most --max-concurrent
  // sequences share a step (admission already keeps the rest waiting).
  const TextConfig& text = model->text_config();
  const int64_t weights = model->backend().DeviceBytesInUse();
  DecodeEngineOptions engine_options;
  engine_options.max_batch = common.max_concurrent;
  engine_options.kv_dtype = kv_dtype;
  engine_options.kv_block_rows = static_cast<int>(*block_rows);
  engine_options.on_sampled = [](const RowSamplingCounts& counts) {
    SampledRowsMetrics::Get().Count(counts);
  };
  // The pool is attached once its size is known: the warm-up says what a step holds. It is
  // declared first so that it outlives the engine, whose sequences hold its blocks.
  std::unique_ptr<KvBlockPool> kv_pool;
  auto engine = std::make_unique<DecodeEngine>(*model, engine_options);
  int64_t workspace = 0;
  if (common.warm_up && model->captures_decode_steps()) {
    // Each batch size's step captured now, on the engine's thread, rather than on first use,
    // the largest first: what it holds is the step's workspace.
    absl::StatusOr<DecodeWarmUp> captured = engine->WarmUp();
    if (!captured.ok()) return host.Fail(Annotate(captured.status(), "warm-up captures"));
    workspace = captured->device_bytes;
    std::fprintf(stderr,
                 "%s: warm-up captured %lld decode steps as graphs (batch sizes up to %d, "
                 "contexts up to %d rows) in %.1f ms; the steps hold %.1f MiB\n",
                 host.name().c_str(), static_cast<long long>(captured->graph_captures),
                 captured->batch, captured->context, captured->ms, workspace / 1048576.0);
  } else if (common.warm_up || gpu_budget > 0) {
    // One step at the largest batch: what later steps cost, and (with a budget) what a step
    // holds on the device.
    absl::StatusOr<double> warm = WarmUpDecode(*model, common.max_concurrent, kv_dtype, &workspace);
    if (!warm.ok()) return host.Fail(Annotate(warm.status(), "warm-up request"));
    std::fprintf(stderr, "%s: warm-up request (a decode step of %d sequences) in %.1f ms\n",
                 host.name().c_str(), common.max_concurrent, *warm);
  }
  if (gpu_budget > 0) {
    // The KV pool takes what the weights, the step and the runtime leave (--kv-pool-bytes, when
    // also given, caps it).
    const int64_t block_bytes = int64_t{2} * *block_rows * text.num_key_value_heads *
                                text.head_dim * static_cast<int64_t>(DTypeSize(kv_dtype));
    absl::StatusOr<GpuMemoryPlan> plan =
        PlanGpuMemory("--gpu-memory", gpu_budget, weights, workspace, block_bytes);
    if (!plan.ok()) return host.Fail(plan.status());
    std::fprintf(stderr, "%s: GPU memory %s\n", host.name().c_str(),
                 DescribeGpuMemoryPlan(*plan).c_str());
    kv_pool_bytes = *pool_bytes > 0 ? std::min(*pool_bytes, plan->kv_pool) : plan->kv_pool;
    telemetry::Registry::Default().AddCallbackGauge(
        "hap_gpu_memory_budget_bytes",
        "The GPU memory this service may hold (--gpu-memory); the KV pool takes what the weights, "
        "the workspace and the CUDA runtime leave.",
        [gpu_budget] { return static_cast<double>(gpu_budget); });
  }
  absl::StatusOr<std::unique_ptr<KvBlockPool>> created =
      KvBlockPool::Create(static_cast<int>(*block_rows), text.num_key_value_heads * text.head_dim,
                          kv_dtype, kv_pool_bytes, &model->backend());
  if (!created.ok()) return host.Fail(created.status());
  kv_pool = *std::move(created);
  std::fprintf(stderr, "%s: KV pool of %lld blocks x %d rows (%s, %.1f MiB)\n", host.name().c_str(),
               static_cast<long long>(kv_pool->stats().blocks_total), static_cast<int>(*block_rows),
               kv_dtype_name.c_str(), kv_pool_bytes / 1048576.0);
  host.state().AttachKvPool(kv_pool.get());
  {
    const KvBlockPool* pool_ptr = kv_pool.get();
    telemetry::Registry& r = telemetry::Registry::Default();
    r.AddCallbackGauge("hap_kv_pool_blocks", "KV blocks the pool can hand out (its capacity).",
                       [pool_ptr] { return static_cast<double>(pool_ptr->stats().blocks_total); });
    r.AddCallbackGauge("hap_kv_pool_blocks_in_use", "KV blocks held by sequences now.",
                       [pool_ptr] { return static_cast<double>(pool_ptr->stats().blocks_in_use); });
    r.AddCallbackGauge("hap_kv_pool_rows_in_use", "KV rows the sequences' blocks hold.",
                       [pool_ptr] { return static_cast<double>(pool_ptr->stats().rows_in_use); });
    r.AddCallbackGauge(
        "hap_kv_pool_unfilled_fraction",
        "Share of the row slots of the blocks in use that hold no row: room reserved for answers "
        "still to come, and the unfilled ends of last blocks (0 when no block is in use).",
        [pool_ptr, block_rows = *block_rows] {
          const KvPoolStats p = pool_ptr->stats();
          const double slots = static_cast<double>(p.blocks_in_use) * block_rows;
          return slots > 0 ? 1.0 - static_cast<double>(p.rows_in_use) / slots : 0.0;
        });
    r.AddCallbackGauge(
        "hap_kv_pool_block_bytes", "Bytes of one KV block (K and V of its rows).",
        [pool_ptr] { return static_cast<double>(pool_ptr->stats().bytes_per_block); });
  }
  engine->SetPool(kv_pool.get());
  {
    const DecodeEngine* e = engine.get();
    telemetry::Registry& r = telemetry::Registry::Default();
    r.AddCallbackCounter("hap_decode_graph_captures_total",
                         "Decode steps captured as CUDA graphs (one per batch size and context "
                         "bound seen; --decode-graphs).",
                         [e] { return static_cast<double>(e->stats().graph_captures); });
    r.AddCallbackCounter("hap_decode_graph_replays_total",
                         "Decode steps run by replaying a captured CUDA graph.",
                         [e] { return static_cast<double>(e->stats().graph_replays); });
  }
  service.SetModel(model.get(), engine.get());
  host.SetServing();
  return host.WaitAndDrain(common.drain_timeout_ms);
}

}  // namespace
}  // namespace hap::svc

int main(int argc, char** argv) {
  return hap::svc::RunService("hap-decode", argc, argv, hap::svc::Specs(), hap::svc::Serve);
}
