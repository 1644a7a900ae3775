// Tests of preprocessor_config.json: llava-hf's file, CLIP defaults when absent, the settings
// reaching the pixels exactly as CLIPImageProcessor's formula says, and errors that name the
// file and the field.
#include "runtime/io/preprocessor_config.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/image/clip_preprocess.h"
#include "tests/io/test_util.h"

namespace hap {
namespace {

using ::hap::testing::ScratchDir;
using ::hap::testing::TinyConfig;
using ::hap::testing::WriteFile;

constexpr char kSource[] = "m/preprocessor_config.json";

// llava-hf/llava-1.5-7b-hf's preprocessor_config.json, as the hub serves it.
constexpr char kLlavaHf336[] = R"({
  "crop_size": {"height": 336, "width": 336},
  "do_center_crop": true,
  "do_convert_rgb": true,
  "do_normalize": true,
  "do_rescale": true,
  "do_resize": true,
  "image_mean": [0.48145466, 0.4578275, 0.40821073],
  "image_processor_type": "CLIPImageProcessor",
  "image_std": [0.26862954, 0.26130258, 0.27577711],
  "processor_class": "LlavaProcessor",
  "resample": 3,
  "rescale_factor": 0.00392156862745098,
  "size": {"shortest_edge": 336}
})";

// The llava-hf file with one top-level key replaced.
std::string With(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = nlohmann::json::parse(kLlavaHf336);
  j[key] = value;
  return j.dump();
}

void ExpectSame(const ImageProcessorConfig& a, const ImageProcessorConfig& b) {
  EXPECT_EQ(a.do_resize, b.do_resize);
  EXPECT_EQ(a.shortest_edge, b.shortest_edge);
  EXPECT_EQ(a.resize_height, b.resize_height);
  EXPECT_EQ(a.resize_width, b.resize_width);
  EXPECT_EQ(a.resample, b.resample);
  EXPECT_EQ(a.do_center_crop, b.do_center_crop);
  EXPECT_EQ(a.crop_height, b.crop_height);
  EXPECT_EQ(a.crop_width, b.crop_width);
  EXPECT_EQ(a.do_rescale, b.do_rescale);
  EXPECT_EQ(a.rescale_factor, b.rescale_factor);
  EXPECT_EQ(a.do_normalize, b.do_normalize);
  EXPECT_EQ(a.image_mean, b.image_mean);
  EXPECT_EQ(a.image_std, b.image_std);
  EXPECT_EQ(a.do_convert_rgb, b.do_convert_rgb);
}

// Deterministic non-uniform pixels.
RgbImage Noise(int w, int h) {
  RgbImage img;
  img.width = w;
  img.height = h;
  img.pixels.resize(static_cast<size_t>(w) * h * 3);
  uint32_t x = 12345;
  for (uint8_t& p : img.pixels) {
    x = x * 1664525u + 1013904223u;
    p = static_cast<uint8_t>(x >> 24);
  }
  return img;
}

TEST(PreprocessorConfigTest, LlavaHfFileIsClipAt336) {
  auto c = ParsePreprocessorConfig(kLlavaHf336, kSource, 336);
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectSame(*c, ClipImageProcessorConfig(336));
  EXPECT_EQ(c->shortest_edge, 336);
  EXPECT_EQ(c->resample, ResampleFilter::kBicubic);
  EXPECT_EQ(c->rescale_factor, 1.0 / 255.0);
  EXPECT_EQ(static_cast<float>(c->image_mean[1]), kClipMean[1]);
  EXPECT_EQ(static_cast<float>(c->image_std[2]), kClipStd[2]);
}

TEST(PreprocessorConfigTest, WritesLlavaHfFormAndReadsItBack) {
  const std::string json = PreprocessorConfigToJson(ClipImageProcessorConfig(336));
  EXPECT_EQ(nlohmann::json::parse(json), nlohmann::json::parse(kLlavaHf336)) << json;
  EXPECT_NE(json.find("\"rescale_factor\": 0.00392156862745098"), std::string::npos) << json;
  EXPECT_NE(json.find("0.48145466,"), std::string::npos) << json;

  ImageProcessorConfig odd = ClipImageProcessorConfig(28);
  odd.shortest_edge = 0;
  odd.resize_height = odd.resize_width = 28;
  odd.resample = ResampleFilter::kBilinear;
  odd.do_center_crop = false;
  odd.image_mean = {0.5, 0.25, 0.1};
  odd.rescale_factor = 0.5;
  auto back = ParsePreprocessorConfig(PreprocessorConfigToJson(odd), kSource, 28);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(*back, odd);
}

TEST(PreprocessorConfigTest, OriginalClipFormAndDefaults) {
  // openai/clip-vit-large-patch14-336 writes plain integers.
  auto ints = ParsePreprocessorConfig(
      R"({"crop_size": 336, "size": 336, "feature_extractor_type": "CLIPFeatureExtractor"})",
      kSource, 336);
  ASSERT_TRUE(ints.ok()) << ints.status();
  ExpectSame(*ints, ClipImageProcessorConfig(336));
  // Absent keys take CLIPImageProcessor's defaults (224 px).
  auto empty = ParsePreprocessorConfig("{}", kSource, 224);
  ASSERT_TRUE(empty.ok()) << empty.status();
  ExpectSame(*empty, ClipImageProcessorConfig(224));
  // A scalar mean/std applies to every channel.
  auto scalar = ParsePreprocessorConfig(With("image_mean", 0.5), kSource, 336);
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->image_mean, (std::array<double, 3>{0.5, 0.5, 0.5}));
}

TEST(PreprocessorConfigTest, AbsentFileGivesClipDefaultsForTheTower) {
  ScratchDir dir;
  const LlavaConfig cfg = TinyConfig();  // 28 px
  auto absent = LoadPreprocessorConfig(dir.path(), cfg);
  ASSERT_TRUE(absent.ok()) << absent.status();
  ExpectSame(*absent, ClipImageProcessorConfig(28));

  ImageProcessorConfig custom = ClipImageProcessorConfig(28);
  custom.image_std = {0.5, 0.5, 0.5};
  WriteFile(dir / "preprocessor_config.json", PreprocessorConfigToJson(custom));
  auto present = LoadPreprocessorConfig(dir.path(), cfg);
  ASSERT_TRUE(present.ok()) << present.status();
  ExpectSame(*present, custom);

  WriteFile(dir / "preprocessor_config.json", R"({"image_std": [1, 0, 1]})");
  auto bad = LoadPreprocessorConfig(dir.path(), cfg);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(dir / "preprocessor_config.json: image_std"),
            std::string::npos)
      << bad.status();
}

// image_mean / image_std (and rescale) reach the pixels exactly as
// (float32(double(u8) * rescale_factor) - mean[c]) / std[c], in float32.
TEST(PreprocessorConfigTest, MeanAndStdGiveThePixelsOfTheFormula) {
  const std::vector<float> mean = {0.25f, 0.5f, 0.75f};
  const std::vector<float> std_dev = {0.125f, 0.3f, 2.0f};
  nlohmann::json j = nlohmann::json::parse(kLlavaHf336);
  j["crop_size"] = {{"height", 8}, {"width", 8}};
  j["size"] = {{"shortest_edge", 8}};
  j["image_mean"] = mean;
  j["image_std"] = std_dev;
  auto cfg = ParsePreprocessorConfig(j.dump(), kSource, 8);
  ASSERT_TRUE(cfg.ok()) << cfg.status();

  // 8 wide, 12 high: the short edge is already 8 (no resampling); the crop keeps rows 2..9.
  const RgbImage img = Noise(8, 12);
  auto x = ClipPreprocess(img, *cfg);
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_EQ(x->size(), 3u * 8 * 8);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 8; ++y) {
      for (int xx = 0; xx < 8; ++xx) {
        const uint8_t u = img.pixels[((y + 2) * 8 + xx) * 3 + c];
        const float rescaled = static_cast<float>(static_cast<double>(u) * (1.0 / 255.0));
        const float want = (rescaled - mean[c]) / std_dev[c];
        ASSERT_EQ((*x)[(c * 8 + y) * 8 + xx], want) << "c " << c << " y " << y << " x " << xx;
      }
    }
  }
  // The default mean/std give other pixels.
  auto clip = ClipPreprocess(img, 8);
  ASSERT_TRUE(clip.ok());
  EXPECT_NE(*clip, *x);

  // No normalisation: the rescaled values; no rescale either: the bytes as floats.
  j["do_normalize"] = false;
  j["rescale_factor"] = 0.5;
  auto half = ClipPreprocess(img, *ParsePreprocessorConfig(j.dump(), kSource, 8));
  j["do_rescale"] = false;
  auto raw = ClipPreprocess(img, *ParsePreprocessorConfig(j.dump(), kSource, 8));
  ASSERT_TRUE(half.ok() && raw.ok());
  const uint8_t u = img.pixels[(2 * 8 + 0) * 3 + 1];  // channel 1 at (0, 0) of the crop
  EXPECT_EQ((*half)[64], static_cast<float>(u * 0.5));
  EXPECT_EQ((*raw)[64], static_cast<float>(u));
}

TEST(PreprocessorConfigTest, BilinearResamples) {
  nlohmann::json j = nlohmann::json::parse(kLlavaHf336);
  j["crop_size"] = {{"height", 16}, {"width", 16}};
  j["size"] = {{"shortest_edge", 16}};
  auto bicubic = ParsePreprocessorConfig(j.dump(), kSource, 16);
  j["resample"] = 2;
  j["do_normalize"] = false;
  j["do_rescale"] = false;
  auto bilinear = ParsePreprocessorConfig(j.dump(), kSource, 16);
  ASSERT_TRUE(bicubic.ok() && bilinear.ok());
  EXPECT_EQ(bilinear->resample, ResampleFilter::kBilinear);
  const RgbImage img = Noise(37, 29);
  auto x = ClipPreprocess(img, *bilinear);
  ASSERT_TRUE(x.ok()) << x.status();
  // 37 x 29 → 20 x 16 (int(16 * 37 / 29) = 20), crop columns 2..17.
  const RgbImage resized = Resize(img, ResampleFilter::kBilinear, 20, 16);
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 16 * 16; ++i) {
      ASSERT_EQ((*x)[c * 256 + i], resized.pixels[((i / 16) * 20 + 2 + i % 16) * 3 + c]);
    }
  }
  bicubic->do_normalize = bicubic->do_rescale = false;
  EXPECT_NE(*ClipPreprocess(img, *bicubic), *x);
}

TEST(PreprocessorConfigTest, ErrorsNameTheFileAndField) {
  struct Case {
    std::string json;
    int image_size;
    std::string fragment;
  };
  const std::string src = std::string(kSource) + ": ";
  const std::vector<Case> cases = {
      {"[1, 2]", 336, src + "top level is a JSON array, expected an object"},
      {"{\"size\": ", 336, src + "malformed JSON"},
      {With("image_mean", "grey"), 336,
       src + "image_mean is a JSON string (\"grey\"), expected "
             "a list of 3 numbers (or one number)"},
      {With("image_mean", {0.5, 0.5}), 336, src + "image_mean is a JSON array ([0.5,0.5])"},
      {With("image_std", {0.5, 0, 0.5}), 336,
       src + "image_std is a JSON array ([0.5,0,0.5]), expected a list of 3 non-zero numbers"},
      {With("resample", 1), 336,
       src + "resample = 1 (LANCZOS) is not supported (supported: 2 = BILINEAR, 3 = BICUBIC)"},
      {With("resample", "bicubic"), 336, src + "resample is a JSON string"},
      {With("resample", 9), 336, src + "resample is a JSON number (9), expected a PIL filter"},
      {With("rescale_factor", -1), 336,
       src + "rescale_factor is a JSON number (-1), expected a "
             "positive number"},
      {With("do_resize", "yes"), 336,
       src + "do_resize is a JSON string (\"yes\"), expected "
             "true or false"},
      {With("size", {{"longest_edge", 336}}), 336, src + "size is a JSON object"},
      {With("size", {{"shortest_edge", 0}}), 336,
       src + "size.shortest_edge is 0, expected an integer in 1..4096"},
      {With("crop_size", {{"height", 336}}), 336, src + "crop_size is a JSON object"},
      {With("crop_size", {{"height", 336}, {"width", 1.5}}), 336,
       src + "crop_size.width is 1.5, expected an integer in 1..4096"},
      {With("image_processor_type", "SiglipImageProcessor"), 336,
       src + "image_processor_type 'SiglipImageProcessor' is not supported"},
      // Consistency with config.json's vision_config.image_size.
      {kLlavaHf336, 224,
       src + "crop_size is {height: 336, width: 336}, but config.json's "
             "vision_config.image_size is 224"},
      {"{}", 336,
       src + "crop_size is {height: 224, width: 224} (CLIPImageProcessor's default: "
             "the file has no crop_size), but config.json's vision_config.image_size "
             "is 336"},
      {With("size", {{"shortest_edge", 300}}), 336,
       src + "size {shortest_edge: 300} is smaller than crop_size {height: 336, width: 336}"},
      {With("do_center_crop", false), 336,
       src + "do_center_crop is false, so do_resize must be true with size {height: 336, "
             "width: 336}"},
  };
  for (const Case& c : cases) {
    auto r = ParsePreprocessorConfig(c.json, kSource, c.image_size);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_NE(r.status().message().find(c.fragment), std::string::npos)
        << "got: " << r.status().message() << "\nwant: " << c.fragment;
  }
}

TEST(PreprocessorConfigTest, CropLargerThanTheImageWithoutResizeIsAnError) {
  nlohmann::json j = nlohmann::json::parse(kLlavaHf336);
  j["do_resize"] = false;
  j["crop_size"] = {{"height", 16}, {"width", 16}};
  auto cfg = ParsePreprocessorConfig(j.dump(), kSource, 16);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_TRUE(ClipPreprocess(Noise(20, 16), *cfg).ok());
  auto small = ClipPreprocess(Noise(20, 15), *cfg);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("crop size 16x16 (height x width) is larger than the "
                                          "image, 15x20"),
            std::string::npos)
      << small.status();
}

}  // namespace
}  // namespace hap
