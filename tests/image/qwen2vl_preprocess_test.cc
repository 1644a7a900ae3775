// Qwen2-VL preprocessing: smart_resize's sizes (expected values from transformers' Python
// algorithm), the patch layout the vision tower reads, and preprocessor_config.json parsing.
// tests/image/qwen2vl_parity.py compares whole images with PIL and @huggingface/transformers.
#include "runtime/image/qwen2vl_preprocess.h"

#include <gtest/gtest.h>

#include <string>

#include "runtime/io/preprocessor_config.h"

namespace hap {
namespace {

void ExpectSize(int h, int w, int64_t min_pixels, int64_t max_pixels, int want_h, int want_w) {
  auto got = SmartResize(h, w, 28, min_pixels, max_pixels);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->height, want_h) << h << "x" << w;
  EXPECT_EQ(got->width, want_w) << h << "x" << w;
}

TEST(SmartResize, MatchesTransformers) {
  constexpr int64_t kMin = 56 * 56, kMax = 28 * 28 * 1280;
  ExpectSize(480, 640, kMin, kMax, 476, 644);
  ExpectSize(1080, 1920, kMin, kMax, 728, 1316);  // scaled down to the budget
  ExpectSize(3000, 4000, kMin, kMax, 840, 1148);
  ExpectSize(2000, 2000, kMin, 200704, 448, 448);
  ExpectSize(1344, 1344, 3136, 12845056, 1344, 1344);
  // Python's round takes ties to even: 70 / 28 = 2.5 → 2, 126 / 28 = 4.5 → 4, 42 / 28 → 2.
  ExpectSize(70, 70, kMin, kMax, 56, 56);
  ExpectSize(126, 126, kMin, kMax, 112, 112);
  ExpectSize(42, 42, kMin, kMax, 56, 56);
  // A side under the factor rounds to 0 and is scaled up with the area.
  ExpectSize(10, 1000, kMin, kMax, 28, 560);
  ExpectSize(5, 999, kMin, kMax, 28, 812);
}

TEST(SmartResize, RefusesExtremeAspectRatios) {
  EXPECT_TRUE(SmartResize(10, 2000, 28, 3136, 1 << 20).ok());  // exactly 200
  auto s = SmartResize(10, 2001, 28, 3136, 1 << 20);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("aspect ratio"), std::string::npos) << s.status();
  EXPECT_FALSE(SmartResize(0, 10, 28, 3136, 1 << 20).ok());
  EXPECT_FALSE(SmartResize(100, 100, 28, 5000, 4000).ok());
}

// value(y, x, c) identifies a pixel and channel.
uint8_t Value(int y, int x, int c) { return static_cast<uint8_t>((y * 3 + x * 5 + c * 7) % 251); }

TEST(Qwen2VLPreprocess, PatchLayout) {
  RgbImage img;
  img.height = 56;
  img.width = 84;
  img.pixels.resize(56 * 84 * 3);
  for (int y = 0; y < 56; ++y) {
    for (int x = 0; x < 84; ++x) {
      for (int c = 0; c < 3; ++c) img.pixels[(y * 84 + x) * 3 + c] = Value(y, x, c);
    }
  }
  Qwen2VLImageProcessorConfig config;
  config.do_resize = false;
  config.do_rescale = false;
  config.do_normalize = false;
  auto out = Qwen2VLPreprocess(img, config);
  ASSERT_TRUE(out.ok()) << out.status();
  constexpr int P = 14, M = 2, T = 2;
  EXPECT_EQ(out->grid.t, 1);
  EXPECT_EQ(out->grid.h, 4);
  EXPECT_EQ(out->grid.w, 6);
  constexpr int kRow = 3 * T * P * P;
  ASSERT_EQ(out->pixel_values.size(), static_cast<size_t>(24 * kRow));
  int row = 0;
  for (int bh = 0; bh < 2; ++bh) {
    for (int bw = 0; bw < 3; ++bw) {
      for (int mh = 0; mh < M; ++mh) {
        for (int mw = 0; mw < M; ++mw, ++row) {
          const int y0 = (bh * M + mh) * P, x0 = (bw * M + mw) * P;
          for (int c = 0; c < 3; ++c) {
            for (int t = 0; t < T; ++t) {
              for (int py = 0; py < P; ++py) {
                for (int px = 0; px < P; ++px) {
                  const float got = out->pixel_values[row * kRow + ((c * T + t) * P + py) * P + px];
                  ASSERT_EQ(got, Value(y0 + py, x0 + px, c))
                      << "row " << row << " c " << c << " t " << t << " y " << py << " x " << px;
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(Qwen2VLPreprocess, WithoutResizeTheSidesMustFitTheMerge) {
  RgbImage img;
  img.height = 42;
  img.width = 56;
  img.pixels.assign(42 * 56 * 3, 9);
  Qwen2VLImageProcessorConfig config;
  config.do_resize = false;
  auto out = Qwen2VLPreprocess(img, config);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("multiples of patch_size * merge_size = 28"),
            std::string::npos)
      << out.status();
}

TEST(Qwen2VLPreprocessorConfig, ReadsQwen25VLsFile) {
  const char* kFile = R"({
    "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
    "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor"})";
  auto c = ParseQwen2VLPreprocessorConfig(kFile, "preprocessor_config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->min_pixels, 3136);
  EXPECT_EQ(c->max_pixels, 12845056);
  EXPECT_EQ(c->merge_size, 2);
  EXPECT_EQ(c->resample, ResampleFilter::kBicubic);
  // Written and read back: the same settings.
  auto again = ParseQwen2VLPreprocessorConfig(Qwen2VLPreprocessorConfigToJson(*c), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->min_pixels, c->min_pixels);
  EXPECT_EQ(again->max_pixels, c->max_pixels);
  EXPECT_EQ(again->image_std, c->image_std);
}

TEST(Qwen2VLPreprocessorConfig, SizeDictAndOverrides) {
  auto c = ParseQwen2VLPreprocessorConfig(
      R"({"size": {"shortest_edge": 1000, "longest_edge": 200000}, "max_pixels": 300000})", "f");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->min_pixels, 1000);
  EXPECT_EQ(c->max_pixels, 300000);  // max_pixels wins over size
  EXPECT_EQ(c->patch_size, 14);      // the processor's default
}

TEST(Qwen2VLPreprocessorConfig, ErrorsNameTheField) {
  for (const auto& [text, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"min_pixels": "many"})", "min_pixels"},
           {R"({"size": {"height": 3}})", "size"},
           {R"({"merge_size": 0})", "merge_size"},
           {R"({"resample": 1})", "resample"},
           {R"({"image_std": [1, 0, 1]})", "image_std"},
           {R"({"min_pixels": 10, "max_pixels": 5})", "min_pixels 10"},
           {R"({"image_processor_type": "CLIPImageProcessor"})", "image_processor_type"}}) {
    auto c = ParseQwen2VLPreprocessorConfig(text, "preprocessor_config.json");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.status().message().find(field), std::string::npos) << c.status();
    EXPECT_NE(c.status().message().find("preprocessor_config.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace hap
