// A fixture for end-to-end suites that share one pipeline: a tiny checkpoint made and the three
// services started on it once per suite, clients to them, and a long-running request.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "tests/e2e/e2e_util.h"

namespace hap::e2e {

class PipelineSuite : public ::testing::Test {
 protected:
  // For a suite's SetUpTestSuite: `hapctl make-tiny` into `model_name` with `seed`, then the
  // services with `options`, whose model_dir, bin_dir and echo_output are set here.
  static void StartPipeline(const std::string& model_name, int seed,
                            sdk::LocalPipelineOptions options);
  // The same on a checkpoint directory already made (`model_dir`, which the suite then owns).
  static void StartPipelineOn(const std::string& model_dir, sdk::LocalPipelineOptions options);
  static void TearDownTestSuite();

  static std::unique_ptr<sdk::Client> Connect(sdk::Service s);

  // A request that runs for hundreds of tokens unless stopped (searched for once per suite).
  static Ask LongAsk();

  static std::string* model_dir_;
  static std::string* image_;
  static sdk::LocalPipeline* pipeline_;

 private:
  static std::optional<Ask>* long_ask_;
};

}  // namespace hap::e2e
