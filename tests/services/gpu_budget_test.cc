// --gpu-memory: how a budget is read and how it divides (services/server/gpu_budget.h).
#include "services/server/gpu_budget.h"

#include <string>

#include "gtest/gtest.h"

namespace hap::svc {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(GpuBudget, ReadsFractionsOfTheDevice) {
  EXPECT_EQ(*ParseGpuMemory("--gpu-memory", "0.5", 80 * kGiB), 40 * kGiB);
  EXPECT_EQ(*ParseGpuMemory("--gpu-memory", "1.0", 80 * kGiB), 80 * kGiB);
  EXPECT_EQ(*ParseGpuMemory("--gpu-memory", " 0.25 ", 4 * kGiB), kGiB);
  for (const char* bad : {"0.0", "1.5", "-0.5", "0.x", "."}) {
    const absl::StatusOr<int64_t> got = ParseGpuMemory("--gpu-memory", bad, 80 * kGiB);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(got.status().message()).find("--gpu-memory"), std::string::npos);
  }
  // A device that does not report its size takes bytes only.
  const absl::StatusOr<int64_t> unknown = ParseGpuMemory("--gpu-memory", "0.5", 0);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(std::string(unknown.status().message()).find("memory size"), std::string::npos);
}

TEST(GpuBudget, ReadsBytesWithBinarySuffixes) {
  EXPECT_EQ(*ParseGpuMemory("--gpu-memory", "", 80 * kGiB), 0);
  EXPECT_EQ(*ParseGpuMemory("--gpu-memory", "1073741824", 0), kGiB);
  EXPECT_EQ(*ParseGpuMemory("--gpu-memory", "40GiB", 0), 40 * kGiB);
  EXPECT_EQ(*ParseGpuMemory("--gpu-memory", "512MiB", 0), kGiB / 2);
  EXPECT_EQ(*ParseGpuMemory("--gpu-memory", "3KiB", 0), 3072);
  EXPECT_EQ(*ParseGpuMemory("--gpu-memory", "2TiB", 0), 2048 * kGiB);
  EXPECT_EQ(*ParseGpuMemory("--gpu-memory", "40 GiB", 0), 40 * kGiB);
  for (const char* bad : {"40GB", "GiB", "0", "-5", "1e9", "40XiB", "99999999999TiB"}) {
    EXPECT_FALSE(ParseGpuMemory("--gpu-memory", bad, 80 * kGiB).ok()) << bad;
  }
}

TEST(GpuBudget, TheKvPoolTakesWhatIsLeft) {
  const absl::StatusOr<GpuMemoryPlan> plan =
      PlanGpuMemory("--gpu-memory", 40 * kGiB, 13 * kGiB, kGiB / 4, 1 << 20);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kv_pool, 40 * kGiB - 13 * kGiB - kGiB / 4 - kGpuRuntimeAllowanceBytes);
  EXPECT_EQ(plan->budget, plan->weights + plan->workspace + plan->allowance + plan->kv_pool);
  const std::string line = DescribeGpuMemoryPlan(*plan);
  EXPECT_NE(line.find("budget 40.00 GiB"), std::string::npos) << line;
  EXPECT_NE(line.find("weights 13.00"), std::string::npos) << line;
}

TEST(GpuBudget, ABudgetTheWeightsDoNotFitFailsNamingTheNumbers) {
  const absl::StatusOr<GpuMemoryPlan> plan =
      PlanGpuMemory("--gpu-memory", 12 * kGiB, 13 * kGiB, kGiB / 4, 1 << 20);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(plan.status().message());
  EXPECT_NE(message.find("12.00 GiB"), std::string::npos) << message;
  EXPECT_NE(message.find("weights (13.00 GiB)"), std::string::npos) << message;
  EXPECT_NE(message.find("raise --gpu-memory"), std::string::npos) << message;
  // Room for the weights but not for one KV block is a failure too.
  EXPECT_FALSE(PlanGpuMemory("--gpu-memory", 13 * kGiB + kGiB / 4 + kGpuRuntimeAllowanceBytes,
                             13 * kGiB, kGiB / 4, 1 << 20)
                   .ok());
}

}  // namespace
}  // namespace hap::svc
