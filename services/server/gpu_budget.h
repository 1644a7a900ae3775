// The GPU memory budget of a service that holds the language model (hap-prefill, hap-decode):
// `--gpu-memory`, a fraction of the device's memory or a byte count, so that two services can
// share one GPU with each sized to its part. hap-decode divides its budget into the weights, a
// warm-up step's workspace, an allowance for what the CUDA runtime holds outside the process's
// allocations, and the KV pool, which takes the rest; a budget the first three do not fit in
// fails at startup, naming the numbers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "services/server/options.h"

namespace hap::svc {

// What the CUDA context, the module images and cuBLAS hold on the device without the process
// allocating it (about 0.5 GiB on an H100 with CUDA 12–13), counted against the budget.
inline constexpr int64_t kGpuRuntimeAllowanceBytes = int64_t{768} << 20;

// `value` as bytes of GPU memory: a fraction of `device_bytes` in (0, 1] ("0.45"), or a byte
// count with an optional binary suffix ("40GiB", "512MiB", "65536KiB", "1073741824"). An empty
// value is 0 (no budget). InvalidArgument naming `flag` and what was expected otherwise, and for
// a fraction where the device's size is unknown (device_bytes = 0).
absl::StatusOr<int64_t> ParseGpuMemory(std::string_view flag, std::string_view value,
                                       int64_t device_bytes);

// How a budget divides.
struct GpuMemoryPlan {
  int64_t budget = 0;
  int64_t weights = 0;    // the model's weights on the device
  int64_t workspace = 0;  // a warm-up step's activations, tables and scratch at the largest batch
  int64_t allowance = kGpuRuntimeAllowanceBytes;
  int64_t kv_pool = 0;  // the rest: budget − weights − workspace − allowance
};

// The plan for `budget`; FailedPrecondition naming every part when less than `min_kv_bytes`
// would be left for the KV pool (`flag` names the budget's flag in the message).
absl::StatusOr<GpuMemoryPlan> PlanGpuMemory(std::string_view flag, int64_t budget, int64_t weights,
                                            int64_t workspace, int64_t min_kv_bytes);

// The --gpu-memory option; `use` ends its help, saying what the service does with the budget.
OptionSpec GpuMemorySpec(const std::string& use);

// The budget `--gpu-memory` (HAP_GPU_MEMORY) gives, in bytes; 0 when it is not set.
// InvalidArgument when it is set without --device cuda or does not parse.
absl::StatusOr<int64_t> GpuBudgetFromOptions(const Options& options, const CommonOptions& common);

// One line for the log: "budget 40.0 GiB = weights 13.5 + workspace 0.3 + runtime 0.8 + KV pool
// 25.4 GiB".
std::string DescribeGpuMemoryPlan(const GpuMemoryPlan& plan);

}  // namespace hap::svc
