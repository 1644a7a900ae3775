// The CUDA kernels' parity table (kernels/cuda/parity) executed on the SIMT emulation, and the
// rule that every __global__ kernel under kernels/cuda has at least one case.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "kernels/cuda/parity/harness.h"

namespace hap::cuda::parity {

// How GoogleTest names a case in its messages.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

namespace {

class ParityTest : public testing::TestWithParam<Case> {};

TEST_P(ParityTest, MatchesTheCpuReference) {
  const Case& c = GetParam();
  const CaseResult r = c.run();
  EXPECT_EQ(r.failure, "") << c.name;
  std::printf("%-48s worst %.3f of tolerance, %.2f ms\n", c.name.c_str(), r.worst, r.ms);
}

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  std::string name = std::to_string(info.index) + "_" + info.param.name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Table, ParityTest, testing::ValuesIn(AllCases()), CaseName);

// Every `__global__ void Name(` (templated or not, with or without __launch_bounds__) in
// kernels/cuda/*.cu.
std::set<std::string> GlobalKernels() {
  std::set<std::string> names;
  const std::regex global(R"(__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\()");
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(HAP_SOURCE_DIR) + "/kernels/cuda")) {
    if (entry.path().extension() != ".cu") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    for (std::sregex_iterator it(s.begin(), s.end(), global), end; it != end; ++it) {
      names.insert((*it)[1]);
    }
  }
  return names;
}

TEST(ParityCoverageTest, EveryGlobalKernelHasACase) {
  const std::set<std::string> kernels = GlobalKernels();
  ASSERT_FALSE(kernels.empty());
  std::set<std::string> covered;
  for (const Case& c : AllCases()) covered.insert(c.kernels.begin(), c.kernels.end());
  for (const std::string& k : kernels) {
    EXPECT_TRUE(covered.count(k)) << "__global__ " << k << " has no parity case";
  }
  for (const std::string& k : covered) {
    EXPECT_TRUE(kernels.count(k)) << "a parity case names " << k << ", which is no kernel";
  }
}

// A row that discarded its CPU reference's status compared the kernel against an unwritten
// array when the reference failed; every reference call goes through Checker::Reference instead.
TEST(ParityCoverageTest, NoRowDiscardsItsReferenceStatus) {
  const std::regex discarded(R"(\(void\)\s*(?:cpu|kernels)::\w+\s*\()");
  int rows = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(HAP_SOURCE_DIR) +
                                                               "/kernels/cuda/parity")) {
    if (entry.path().filename().string().rfind("rows_", 0) != 0) continue;
    ++rows;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    for (std::sregex_iterator it(s.begin(), s.end(), discarded), end; it != end; ++it) {
      ADD_FAILURE() << entry.path().filename() << " discards a reference's status: "
                    << it->str();
    }
  }
  EXPECT_GT(rows, 0) << "no rows_*.cc found";
}

TEST(CheckerTest, AFailedReferenceFailsTheCaseWithItsError) {
  Checker c;
  EXPECT_FALSE(c.Reference(absl::InvalidArgumentError("d must be positive")));
  EXPECT_EQ(c.Result(0).failure,
            "the CPU reference failed: INVALID_ARGUMENT: d must be positive");
  Checker ok;
  EXPECT_TRUE(ok.Reference(absl::OkStatus()));
  EXPECT_EQ(ok.Result(0).failure, "");
}

}  // namespace
}  // namespace hap::cuda::parity
