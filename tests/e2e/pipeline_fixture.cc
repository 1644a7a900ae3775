#include "tests/e2e/pipeline_fixture.h"

#include <mutex>
#include <utility>

namespace hap::e2e {

std::string* PipelineSuite::model_dir_ = nullptr;
std::string* PipelineSuite::image_ = nullptr;
sdk::LocalPipeline* PipelineSuite::pipeline_ = nullptr;
std::optional<Ask>* PipelineSuite::long_ask_ = nullptr;

namespace {
std::mutex long_ask_mu;  // LongAsk may first be called from a test's thread
}  // namespace

void PipelineSuite::StartPipeline(const std::string& model_name, int seed,
                                  sdk::LocalPipelineOptions options) {
  const std::string dir = MakeTinyModel(model_name, seed);
  ASSERT_FALSE(dir.empty()) << "hapctl make-tiny failed";
  StartPipelineOn(dir, std::move(options));
}

void PipelineSuite::StartPipelineOn(const std::string& model_dir,
                                    sdk::LocalPipelineOptions options) {
  model_dir_ = new std::string(model_dir);
  image_ = new std::string(ReadBytes(TestImagePath()));
  options.model_dir = *model_dir_;
  options.bin_dir = HAP_BIN_DIR;
  options.echo_output = false;
  auto p = sdk::LocalPipeline::Start(options);
  ASSERT_TRUE(p.ok()) << p.status();
  pipeline_ = p->release();
}

void PipelineSuite::TearDownTestSuite() {
  if (pipeline_ != nullptr) pipeline_->Stop().IgnoreError();
  delete pipeline_;
  delete model_dir_;
  delete image_;
  delete long_ask_;
  pipeline_ = nullptr;
  model_dir_ = image_ = nullptr;
  long_ask_ = nullptr;
}

std::unique_ptr<sdk::Client> PipelineSuite::Connect(sdk::Service s) {
  auto c = sdk::Client::Connect(pipeline_->address(s));
  EXPECT_TRUE(c.ok());
  return std::move(*c);
}

Ask PipelineSuite::LongAsk() {
  std::lock_guard<std::mutex> lock(long_ask_mu);
  if (long_ask_ == nullptr) long_ask_ = new std::optional<Ask>(FindLongAsk(*model_dir_, 400));
  EXPECT_TRUE(long_ask_->has_value()) << "no long-running request found on this checkpoint";
  return long_ask_->value_or(Ask());
}

}  // namespace hap::e2e
