// A burst of simultaneous `hapctl generate` processes (each its own connection) against the
// services with small limits: every request is served or refused with RESOURCE_EXHAUSTED naming
// the limit, never a connection failure, and the front door serves normally right after.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdk/child_process.h"
#include "sdk/local_pipeline.h"
#include "tests/e2e/e2e_util.h"

namespace hap::e2e {
namespace {

TEST(BurstTest, EveryRequestIsServedOrRefusedByTheLimit) {
  const std::string model = MakeTinyModel("burst_tiny8", 4);
  ASSERT_FALSE(model.empty());
  sdk::LocalPipelineOptions o;
  o.model_dir = model;
  o.bin_dir = HAP_BIN_DIR;
  o.echo_output = false;
  o.encoder_args = o.decode_args = o.prefill_args = {"--max-concurrent", "4", "--queue-length",
                                                     "16", "--threads", "1"};
  auto pipeline = sdk::LocalPipeline::Start(o);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  const std::string address = (*pipeline)->front_door();

  // No retries: a refusal must reach the client as it is, and a connection failure must not be
  // hidden behind a successful retry.
  const std::string command = absl::StrCat(
      "exec '", HapctlPath(), "' generate --server ", address, " --image '", TestImagePath(),
      "' --prompt 'What is in the picture?' --max-new-tokens 24 --retries 1 2>&1");
  constexpr int kBurst = 60;
  std::vector<std::unique_ptr<sdk::ChildProcess>> clients;
  for (int i = 0; i < kBurst; ++i) {
    auto c = sdk::ChildProcess::Spawn({"/bin/sh", "-c", command}, "");
    ASSERT_TRUE(c.ok()) << c.status();
    clients.push_back(std::move(*c));
  }
  int served = 0, refused = 0;
  std::vector<std::string> other;
  for (auto& c : clients) {
    auto lines = c->ReadAll(std::chrono::seconds(240));
    const std::optional<int> code = c->Wait(std::chrono::seconds(10));
    std::string out;
    if (lines.ok()) {
      for (const std::string& l : *lines) absl::StrAppend(&out, l, "\n");
    }
    if (code == 0) {
      ++served;
    } else if (out.find("server busy: 4 requests running and 16 queued (limits --max-concurrent "
                        "and --queue-length)") != std::string::npos) {
      ++refused;
    } else {
      other.push_back(absl::StrCat("exit ", code.value_or(-1), ": ", out));
    }
  }
  EXPECT_TRUE(other.empty()) << other.size() << " requests neither served nor refused; first: "
                             << other.front();
  EXPECT_EQ(served + refused, kBurst);
  EXPECT_GE(served, 20) << "the running and queued requests must all be served";
  std::fprintf(stderr, "burst of %d: %d served, %d refused by the limits\n", kBurst, served,
               refused);

  // Right after, the front door serves as usual.
  const CommandResult after = RunCommand({HapctlPath(), "generate", "--server", address,
                                          "--image", TestImagePath(), "--prompt",
                                          "What is in the picture?", "--max-new-tokens", "4"});
  EXPECT_EQ(after.exit_code, 0) << after.out;
}

}  // namespace
}  // namespace hap::e2e
