// The cancellation hook the services use: with a ScopedCancellation that says "cancelled",
// prefill stops between decoder layers and image encoding between vision layers, with
// CANCELLED; without one they run.
#include "runtime/model/cancellation.h"

#include <atomic>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "runtime/image/png_encode.h"
#include "runtime/model/pipeline.h"
#include "runtime/tiny/tiny_model.h"
#include "tests/common/tiny_checkpoint.h"

namespace hap {
namespace {

// A tiny checkpoint written under the build tree, loaded, and a flat grey test image as PNG.
struct TinySetup {
  std::unique_ptr<LlavaModel> model;
  std::string png;
};

TinySetup MakeTiny(const std::string& name, int layers, int vision_layers) {
  TinySetup out;
  const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/e2e/" + name;
  TinyModelOptions o = testing_support::TinyOptions(0, layers);
  o.vision_layers = vision_layers;
  EXPECT_TRUE(WriteTinyModel(o, dir).ok());
  auto model = LlavaModel::Load(dir, {});
  EXPECT_TRUE(model.ok()) << model.status();
  if (model.ok()) out.model = std::move(*model);
  RgbImage img;
  img.width = img.height = 30;
  img.pixels.assign(30 * 30 * 3, 90);
  auto png = EncodePng(img);
  EXPECT_TRUE(png.ok());
  if (png.ok()) out.png = std::move(*png);
  return out;
}

TEST(CancellationTest, PrefillStopsBetweenLayers) {
  TinySetup tiny = MakeTiny("cancel_tiny", /*layers=*/4, /*vision_layers=*/2);
  ASSERT_NE(tiny.model, nullptr);
  PruneRequest prune;
  prune.method = "none";
  auto encoded = EncodeImage(*tiny.model, tiny.png, prune);
  ASSERT_TRUE(encoded.ok()) << encoded.status();

  Sampler sampler{SamplingParams()};
  EXPECT_TRUE(RunPrefill(*tiny.model, "What is it?", *encoded, prune, &sampler).ok());
  std::atomic<int> polls{0};
  {
    ScopedCancellation outer([] { return false; });
    {
      // Asked twice per layer, before and after its slice boundary: the fifth ask is before
      // layer 2.
      ScopedCancellation inner([&] { return ++polls >= 5; });
      auto cancelled = RunPrefill(*tiny.model, "What is it?", *encoded, prune, &sampler);
      ASSERT_FALSE(cancelled.ok());
      EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled);
      EXPECT_NE(cancelled.status().message().find("layer 2"), std::string::npos)
          << cancelled.status();
    }
    EXPECT_FALSE(CancellationRequested());  // the outer scope is back
    EXPECT_TRUE(RunPrefill(*tiny.model, "What is it?", *encoded, prune, &sampler).ok());
  }
}

TEST(CancellationTest, ImageEncodingStopsBetweenVisionLayers) {
  // Feature layer -2 of 4: three vision layers run.
  TinySetup tiny = MakeTiny("cancel_tiny_vision", /*layers=*/2, /*vision_layers=*/4);
  ASSERT_NE(tiny.model, nullptr);
  PruneRequest prune;
  prune.method = "none";
  int polls = 0;
  {
    ScopedCancellation scope([&] { return ++polls >= 2; });  // cancelled before layer 1
    auto cancelled = EncodeImage(*tiny.model, tiny.png, prune);
    ASSERT_FALSE(cancelled.ok());
    EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled);
    EXPECT_NE(cancelled.status().message().find("before layer 1"), std::string::npos)
        << cancelled.status();
  }
  EXPECT_EQ(polls, 2);
  EXPECT_TRUE(EncodeImage(*tiny.model, tiny.png, prune).ok());  // without a scope it runs
}

}  // namespace
}  // namespace hap
