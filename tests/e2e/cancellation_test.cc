// The cancellation hook the services use: with a ScopedCancellation that says "cancelled",
// prefill stops between decoder layers and image encoding between vision layers, with
// CANCELLED; without one they run.
#include "runtime/model/cancellation.h"

#include <atomic>

#include "gtest/gtest.h"
#include "runtime/image/png_encode.h"
#include "runtime/model/pipeline.h"
#include "runtime/model/tiny_model.h"

namespace hap {
namespace {

TEST(CancellationTest, PrefillStopsBetweenLayers) {
  const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/e2e/cancel_tiny";
  TinyModelOptions o;
  o.layers = 4;
  o.corpus_path = std::string(HAP_SOURCE_DIR) + "/data/tokenizer/corpus.txt";
  ASSERT_TRUE(WriteTinyModel(o, dir).ok());
  auto model = LlavaModel::Load(dir, {});
  ASSERT_TRUE(model.ok()) << model.status();
  RgbImage img;
  img.width = img.height = 30;
  img.pixels.assign(30 * 30 * 3, 90);
  auto png = EncodePng(img);
  ASSERT_TRUE(png.ok());
  PruneRequest prune;
  prune.method = "none";
  auto encoded = EncodeImage(**model, *png, prune);
  ASSERT_TRUE(encoded.ok()) << encoded.status();

  Sampler sampler{SamplingParams()};
  EXPECT_TRUE(RunPrefill(**model, "What is it?", *encoded, prune, &sampler).ok());
  std::atomic<int> polls{0};
  {
    ScopedCancellation outer([] { return false; });
    {
      ScopedCancellation inner([&] { return ++polls >= 3; });  // cancelled before layer 2
      auto cancelled = RunPrefill(**model, "What is it?", *encoded, prune, &sampler);
      ASSERT_FALSE(cancelled.ok());
      EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled);
      EXPECT_NE(cancelled.status().message().find("layer 2"), std::string::npos)
          << cancelled.status();
    }
    EXPECT_FALSE(CancellationRequested());  // the outer scope is back
    EXPECT_TRUE(RunPrefill(**model, "What is it?", *encoded, prune, &sampler).ok());
  }
}

TEST(CancellationTest, ImageEncodingStopsBetweenVisionLayers) {
  const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/e2e/cancel_tiny_vision";
  TinyModelOptions o;
  o.vision_layers = 4;  // feature layer -2: three of them run
  o.corpus_path = std::string(HAP_SOURCE_DIR) + "/data/tokenizer/corpus.txt";
  ASSERT_TRUE(WriteTinyModel(o, dir).ok());
  auto model = LlavaModel::Load(dir, {});
  ASSERT_TRUE(model.ok()) << model.status();
  RgbImage img;
  img.width = img.height = 30;
  img.pixels.assign(30 * 30 * 3, 90);
  auto png = EncodePng(img);
  ASSERT_TRUE(png.ok());
  PruneRequest prune;
  prune.method = "none";
  int polls = 0;
  {
    ScopedCancellation scope([&] { return ++polls >= 2; });  // cancelled before layer 1
    auto cancelled = EncodeImage(**model, *png, prune);
    ASSERT_FALSE(cancelled.ok());
    EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled);
    EXPECT_NE(cancelled.status().message().find("before layer 1"), std::string::npos)
        << cancelled.status();
  }
  EXPECT_EQ(polls, 2);
  EXPECT_TRUE(EncodeImage(**model, *png, prune).ok());  // without a scope it runs
}

}  // namespace
}  // namespace hap
