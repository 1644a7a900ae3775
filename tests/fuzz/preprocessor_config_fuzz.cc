// Fuzzes preprocessor_config.json parsing (runtime/io/preprocessor_config.cc) against the tower
// sizes of the default model (168), CLIP ViT-B (224) and llava-1.5 (336). A config that parses
// must round-trip through PreprocessorConfigToJson and turn a small image into exactly
// image_size x image_size pixels with ClipPreprocess.
#include <string>
#include <vector>

#include "runtime/image/clip_preprocess.h"
#include "runtime/io/preprocessor_config.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/json_mutator.h"

namespace {

// A 37 x 23 gradient: odd sizes, landscape, so both resize forms and the crop do real work.
const hap::RgbImage& SmallImage() {
  static const hap::RgbImage image = [] {
    hap::RgbImage img;
    img.width = 37;
    img.height = 23;
    img.pixels.resize(static_cast<size_t>(img.width) * img.height * 3);
    for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(i * 7);
    return img;
  }();
  return image;
}

}  // namespace

HAP_FUZZ_JSON_MUTATOR()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = hap::fuzz::AsView(data, size);
  for (int image_size : {168, 224, 336}) {
    auto config = hap::ParsePreprocessorConfig(text, "preprocessor_config.json", image_size);
    if (!config.ok()) {
      HAP_FUZZ_CHECK(absl::IsInvalidArgument(config.status()), "unexpected error code: %s",
                     config.status().ToString().c_str());
      continue;
    }
    const std::string json = hap::PreprocessorConfigToJson(*config);
    auto again = hap::ParsePreprocessorConfig(json, "round trip", image_size);
    HAP_FUZZ_CHECK(again.ok(), "the written config does not parse: %s\n%s",
                   again.status().ToString().c_str(), json.c_str());
    const std::string json2 = hap::PreprocessorConfigToJson(*again);
    HAP_FUZZ_CHECK(json == json2, "round trip differs:\n%s\n%s", json.c_str(), json2.c_str());

    // A config the parser accepts serves every image: a failure here would fail every request.
    // Only a crop without a resize is checked per image (an image under the crop size is
    // refused as transformers would zero-pad it).
    auto pixels = hap::ClipPreprocess(SmallImage(), *config);
    const bool per_image = config->do_center_crop && !config->do_resize;
    HAP_FUZZ_CHECK(pixels.ok() || per_image,
                   "an accepted config cannot preprocess a 37x23 image: %s\n%s",
                   pixels.status().ToString().c_str(), json.c_str());
    if (!pixels.ok()) continue;
    HAP_FUZZ_CHECK(pixels->size() == static_cast<size_t>(3) * image_size * image_size,
                   "%zu values for a %d px tower", pixels->size(), image_size);
  }
  return 0;
}
