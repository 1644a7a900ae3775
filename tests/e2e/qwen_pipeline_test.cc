// The three service binaries on a Qwen2.5-VL directory against `hapctl run` in process: two
// images whose grids differ (so V differs per request), unpruned and pruned with budgets stated
// as percentages of each image's V, token-for-token equal; a rendered prompt (raw_prompt) equal
// to the question it renders; VisionZip and malformed prompts refused with the reason, the
// front door serving after each.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/image/png_encode.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/pipeline_fixture.h"

namespace hap::e2e {
namespace {

// What Qwen2.5-VL's chat template renders for one user turn of the image and then `question`,
// with its default system turn and the assistant's turn opened.
std::string RenderedQwenPrompt(const std::string& question) {
  return absl::StrCat(
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
      "<|vision_start|><|image_pad|><|vision_end|>",
      question, "<|im_end|>\n<|im_start|>assistant\n");
}

class QwenPipelineTest : public PipelineSuite {
 protected:
  static void SetUpTestSuite() {
    // 8 layers: the front door's default budget (hap, 33.3%) is reachable, as on the real model.
    const std::string dir = MakeTinyQwenModel("qwen_pipeline_tiny", 3, 8);
    ASSERT_FALSE(dir.empty()) << "hapctl make-tiny --family qwen2.5-vl failed";
    // 280 x 112 pixels: a grid of 8 x 20 patches, 40 visual tokens, where the scene photograph
    // (168 x 168) gives 36.
    wide_image_ = new std::string(absl::StrCat(dir, "-wide.png"));
    RgbImage wide;
    wide.width = 280;
    wide.height = 112;
    wide.pixels.resize(static_cast<size_t>(wide.width) * wide.height * 3);
    for (size_t i = 0; i < wide.pixels.size(); ++i) {
      wide.pixels[i] = static_cast<uint8_t>((i * 37 + (i / 840) * 11) % 251);
    }
    ASSERT_TRUE(WritePng(*wide_image_, wide).ok());
    sdk::LocalPipelineOptions o;
    o.encoder_args = o.decode_args = o.prefill_args = {"--threads", "1"};
    StartPipelineOn(dir, o);
    client_ = Connect(sdk::Service::kPrefill).release();
  }
  static void TearDownTestSuite() {
    delete client_;
    delete wide_image_;
    PipelineSuite::TearDownTestSuite();
  }

  // The front door answers a plain request (after a refusal).
  static void ExpectServing() {
    auto got = client_->Generate(ToRequest(Ask(), *image_));
    EXPECT_TRUE(got.ok()) << "the front door stopped serving: " << got.status();
  }

  static std::string* wide_image_;
  static sdk::Client* client_;
};
std::string* QwenPipelineTest::wide_image_ = nullptr;
sdk::Client* QwenPipelineTest::client_ = nullptr;

TEST_F(QwenPipelineTest, EveryImageAndMethodAnswersAsHapctlRun) {
  for (const std::string& image : {std::string(), *wide_image_}) {
    for (const auto& [method, retain] : std::vector<std::pair<std::string, std::string>>{
             {"none", ""}, {"hap", "50%"}, {"divprune", "25%"}, {"fastv", "30%"}}) {
      Ask ask;
      ask.image_path = image;
      ask.method = method;
      ask.retain = retain;
      ExpectSameAsRun(*model_dir_, client_, ask);
    }
  }
  // The two images really gave different counts: a percentage budget is of each one's own V.
  Ask ask;
  ask.method = "hap";
  ask.retain = "50%";
  auto photo = client_->Generate(ToRequest(ask, *image_));
  auto wide = client_->Generate(ToRequest(ask, ReadBytes(*wide_image_)));
  ASSERT_TRUE(photo.ok()) << photo.status();
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(photo->stats.image_visual_tokens(), 36);
  EXPECT_EQ(wide->stats.image_visual_tokens(), 40);
  EXPECT_NEAR(photo->stats.average_visual_tokens(), 18, 1.0);
  EXPECT_NEAR(wide->stats.average_visual_tokens(), 20, 1.0);
}

TEST_F(QwenPipelineTest, ARenderedPromptAnswersAsTheQuestionItRenders) {
  Ask ask;
  ask.method = "hap";
  ask.retain = "50%";
  const std::string& image = *image_;
  auto asked = client_->Generate(ToRequest(ask, image));
  ASSERT_TRUE(asked.ok()) << asked.status();
  hap::v1::GenerateRequest raw = ToRequest(ask, image);
  raw.clear_prompt();
  raw.set_raw_prompt(RenderedQwenPrompt(ask.prompt));
  auto rendered = client_->Generate(raw);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(rendered->stats.prompt_tokens(), asked->stats.prompt_tokens());
  EXPECT_EQ(Ids(rendered->stats.token_ids()), Ids(asked->stats.token_ids()));
  EXPECT_EQ(Ids(rendered->stats.layer_visual_tokens()), Ids(asked->stats.layer_visual_tokens()));
}

TEST_F(QwenPipelineTest, RefusalsNameTheReasonAndLeaveItServing) {
  const std::string& image = *image_;
  struct Case {
    const char* name;
    hap::v1::GenerateRequest request;
    std::string message;
  };
  std::vector<Case> cases;
  {
    Ask ask;
    ask.method = "visionzip";
    ask.retain = "16";
    cases.push_back({"visionzip", ToRequest(ask, image), "CLS token"});
  }
  {
    hap::v1::GenerateRequest r = ToRequest(Ask(), image);
    r.clear_prompt();
    r.set_raw_prompt("<|im_start|>user\nNo image here.<|im_end|>\n<|im_start|>assistant\n");
    cases.push_back({"raw prompt without the image", r, "0 <|image_pad|> tokens"});
  }
  {
    hap::v1::GenerateRequest r = ToRequest(Ask(), image);
    r.clear_prompt();
    r.set_raw_prompt(RenderedQwenPrompt("<|vision_start|><|image_pad|><|vision_end|>Two?"));
    cases.push_back({"raw prompt with two images", r, "2 <|image_pad|> tokens"});
  }
  {
    Ask ask;
    ask.method = "hap";
    ask.retain = "5%";  // of the photograph's 36: fewer than HAP's groups can keep
    cases.push_back({"budget this image cannot reach", ToRequest(ask, image), "minimum reachable"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto got = client_->Generate(c.request);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    EXPECT_NE(got.status().message().find(c.message), std::string::npos) << got.status();
    ExpectServing();
  }
}

}  // namespace
}  // namespace hap::e2e
