// Fuzzes image decoding (runtime/image: DecodeImage's sniffing, the libjpeg and libpng decoders),
// the header-only size probe (ReadImageSize: where the image decodes, it gives the decoded size)
// and CLIP preprocessing of whatever decodes. The pixel limit is lowered to 4 megapixels so one
// input stays fast; the processor (bicubic with a crop, or bilinear to an exact size) is picked
// by the input's size, so one corpus covers both.
#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/image/clip_preprocess.h"
#include "runtime/image/image.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hap::ImageLimits limits;
  limits.max_pixels = 4'000'000;
  auto header = hap::ReadImageSize(hap::fuzz::AsView(data, size), limits);
  if (!header.ok()) {
    HAP_FUZZ_CHECK(
        absl::IsInvalidArgument(header.status()) || absl::IsResourceExhausted(header.status()),
        "ReadImageSize: unexpected error code: %s", header.status().ToString().c_str());
  }
  auto image = hap::DecodeImage(hap::fuzz::AsView(data, size), limits);
  if (image.ok()) {
    // What decodes has a readable header, and the header said its size.
    HAP_FUZZ_CHECK(header.ok() && header->width == image->width && header->height == image->height,
                   "header %s, decoded %dx%d",
                   header.ok() ? absl::StrCat(header->width, "x", header->height).c_str()
                               : header.status().ToString().c_str(),
                   image->width, image->height);
  }
  if (!image.ok()) {
    HAP_FUZZ_CHECK(
        absl::IsInvalidArgument(image.status()) || absl::IsResourceExhausted(image.status()),
        "unexpected error code: %s", image.status().ToString().c_str());
    return 0;
  }
  const hap::RgbImage& img = *image;
  HAP_FUZZ_CHECK(img.width > 0 && img.height > 0 &&
                     static_cast<int64_t>(img.width) * img.height <= limits.max_pixels,
                 "decoded %dx%d", img.width, img.height);
  HAP_FUZZ_CHECK(img.pixels.size() == static_cast<size_t>(img.width) * img.height * 3,
                 "%zu bytes for %dx%d", img.pixels.size(), img.width, img.height);

  hap::ImageProcessorConfig config = hap::ClipImageProcessorConfig(28);
  if (size % 2 == 1) {
    config.do_center_crop = false;
    config.shortest_edge = 0;
    config.resize_height = 20;
    config.resize_width = 28;
    config.resample = hap::ResampleFilter::kBilinear;
  }
  auto pixels = hap::ClipPreprocess(img, config);
  if (!pixels.ok()) {
    // Only an aspect ratio too extreme for the shortest-edge resize is refused.
    HAP_FUZZ_CHECK(absl::IsInvalidArgument(pixels.status()) && config.shortest_edge > 0,
                   "%dx%d: %s", img.width, img.height, pixels.status().ToString().c_str());
    return 0;
  }
  const size_t want = config.do_center_crop ? 3 * 28 * 28 : 3 * 20 * 28;
  HAP_FUZZ_CHECK(pixels->size() == want, "%zu values, want %zu", pixels->size(), want);
  return 0;
}
