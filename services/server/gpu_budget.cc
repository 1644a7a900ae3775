#include "services/server/gpu_budget.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/device/device_backend.h"

namespace hap::svc {
namespace {

double GiB(int64_t bytes) { return static_cast<double>(bytes) / (int64_t{1} << 30); }

}  // namespace

absl::StatusOr<int64_t> ParseGpuMemory(std::string_view flag, std::string_view value,
                                       int64_t device_bytes) {
  const std::string v(absl::StripAsciiWhitespace(absl::string_view(value.data(), value.size())));
  if (v.empty()) return 0;
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s '%s': %s (a fraction of the GPU's memory such as 0.45, or bytes such as 40GiB, "
        "512MiB or 1073741824)",
        std::string(flag), v, why));
  };
  if (v.find('.') != std::string::npos) {
    double fraction = 0;
    if (!absl::SimpleAtod(v, &fraction) || !(fraction > 0) || fraction > 1) {
      return bad("a fraction must lie in (0, 1]");
    }
    if (device_bytes <= 0) return bad("the device does not report its memory size");
    return static_cast<int64_t>(std::floor(fraction * static_cast<double>(device_bytes)));
  }
  static constexpr struct {
    const char* suffix;
    int shift;
  } kUnits[] = {{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}};
  std::string digits = v;
  int shift = 0;
  for (const auto& unit : kUnits) {
    const std::string suffix = unit.suffix;
    if (v.size() > suffix.size() &&
        v.compare(v.size() - suffix.size(), suffix.size(), suffix) == 0) {
      digits = v.substr(0, v.size() - suffix.size());
      shift = unit.shift;
      break;
    }
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(digits, &n) || n <= 0) return bad("not a positive whole number of bytes");
  if (n > (int64_t{1} << (62 - shift))) return bad("too large");
  return n << shift;
}

absl::StatusOr<GpuMemoryPlan> PlanGpuMemory(std::string_view flag, int64_t budget, int64_t weights,
                                            int64_t workspace, int64_t min_kv_bytes) {
  GpuMemoryPlan plan;
  plan.budget = budget;
  plan.weights = weights;
  plan.workspace = workspace;
  plan.kv_pool = budget - weights - workspace - plan.allowance;
  if (plan.kv_pool < min_kv_bytes) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: the budget of %.2f GiB does not fit the weights (%.2f GiB), a step's workspace "
        "(%.2f GiB) and the CUDA runtime's allowance (%.2f GiB) with %.2f GiB left for KV "
        "blocks (at least %.4f GiB needed): raise %s, or lower --max-concurrent (the workspace "
        "grows with the batch)",
        std::string(flag), GiB(budget), GiB(weights), GiB(workspace), GiB(plan.allowance),
        GiB(std::max<int64_t>(plan.kv_pool, 0)), GiB(min_kv_bytes), std::string(flag)));
  }
  return plan;
}

OptionSpec GpuMemorySpec(const std::string& use) {
  return {
      "gpu-memory", "HAP_GPU_MEMORY", "",
      absl::StrCat("with --device cuda, the GPU memory this service may hold: a fraction of the "
                   "GPU (0.45) or bytes (40GiB); ",
                   use)};
}

absl::StatusOr<int64_t> GpuBudgetFromOptions(const Options& options, const CommonOptions& common) {
  const std::string value = options.Get("gpu-memory");
  if (value.empty()) return 0;
  if (common.device != "cuda") {
    return absl::InvalidArgumentError(
        "--gpu-memory is a GPU's budget: it needs --device cuda (on the CPU, --kv-pool-bytes and "
        "--max-kv-bytes bound the KV caches)");
  }
  absl::StatusOr<int64_t> device_bytes = DeviceMemoryBytes(common.device);
  if (!device_bytes.ok()) return device_bytes.status();
  return ParseGpuMemory("--gpu-memory", value, *device_bytes);
}

std::string DescribeGpuMemoryPlan(const GpuMemoryPlan& plan) {
  return absl::StrFormat(
      "budget %.2f GiB = weights %.2f + workspace %.2f + CUDA runtime allowance %.2f + KV pool "
      "%.2f GiB",
      GiB(plan.budget), GiB(plan.weights), GiB(plan.workspace), GiB(plan.allowance),
      GiB(plan.kv_pool));
}

}  // namespace hap::svc
