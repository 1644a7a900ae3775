// ClipPreprocess: resize + centre crop (only the crop is resampled) + rescale + normalisation.
#include "runtime/image/clip_preprocess.h"

#include <algorithm>
#include <climits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/image/pixel_normalize.h"
#include "runtime/image/resize.h"

namespace hap {

namespace {

// Vision towers use 224..1024; the bound keeps a bad config from allocating gigabytes.
constexpr int kMaxClipSize = 4096;

absl::Status CheckSize(const char* what, int64_t v) {
  if (v > 0 && v <= kMaxClipSize) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " ", v, " is outside 1..", kMaxClipSize));
}

}  // namespace

ImageProcessorConfig ClipImageProcessorConfig(int size) {
  ImageProcessorConfig c;
  c.shortest_edge = size;
  c.crop_height = size;
  c.crop_width = size;
  return c;
}

absl::StatusOr<std::vector<float>> ClipPreprocess(const RgbImage& img,
                                                  const ImageProcessorConfig& c) {
  if (c.do_resize) {
    if (c.shortest_edge > 0) {
      if (absl::Status s = CheckSize("resize size", c.shortest_edge); !s.ok()) return s;
    } else {
      if (absl::Status s = CheckSize("resize height", c.resize_height); !s.ok()) return s;
      if (absl::Status s = CheckSize("resize width", c.resize_width); !s.ok()) return s;
    }
  }
  if (c.do_center_crop) {
    if (absl::Status s = CheckSize("crop size", c.crop_height); !s.ok()) return s;
    if (absl::Status s = CheckSize("crop size", c.crop_width); !s.ok()) return s;
  }
  if (img.width <= 0 || img.height <= 0 ||
      img.pixels.size() != static_cast<size_t>(img.width) * img.height * 3) {
    return absl::InvalidArgumentError(absl::StrCat("bad image: ", img.width, "x", img.height,
                                                   " with ", img.pixels.size(), " bytes"));
  }
  const int64_t w = img.width, h = img.height;
  int64_t nw = w, nh = h;  // size after the resize
  if (c.do_resize && c.shortest_edge > 0) {
    const int64_t size = c.shortest_edge;
    const int64_t short_side = std::min(w, h), long_side = std::max(w, h);
    // Python's int(size * long / short): exact integer product, correctly rounded true
    // division (both operands < 2^53, so the double division rounds identically), truncation.
    const double new_long_f =
        static_cast<double>(size * long_side) / static_cast<double>(short_side);
    if (new_long_f >= static_cast<double>(INT_MAX)) {
      return absl::InvalidArgumentError(
          absl::StrCat("image aspect ratio ", w, "x", h, " is too extreme to resize"));
    }
    const int64_t new_long = static_cast<int64_t>(new_long_f);
    nw = w <= h ? size : new_long;
    nh = w <= h ? new_long : size;
  } else if (c.do_resize) {
    nw = c.resize_width;
    nh = c.resize_height;
  }
  int64_t top = 0, left = 0, ow = nw, oh = nh;
  if (c.do_center_crop) {
    if (c.crop_height > nh || c.crop_width > nw) {
      return absl::InvalidArgumentError(absl::StrCat(
          "crop size ", c.crop_height, "x", c.crop_width, " (height x width) is larger than the ",
          c.do_resize ? "resized " : "", "image, ", nh, "x", nw,
          "; transformers would zero-pad it, which is not supported"));
    }
    top = (nh - c.crop_height) / 2;
    left = (nw - c.crop_width) / 2;
    oh = c.crop_height;
    ow = c.crop_width;
  } else if (ow > kMaxClipSize || oh > kMaxClipSize) {
    return absl::InvalidArgumentError(absl::StrCat("the preprocessed image would be ", ow, "x", oh,
                                                   ", over ", kMaxClipSize, " pixels a side"));
  }
  const RgbImage crop =
      ResizeRegion(img, c.resample, nw, nh, left, top, static_cast<int>(ow), static_cast<int>(oh));

  const PixelNormalizer normalize(c.do_rescale, c.rescale_factor, c.do_normalize, c.image_mean,
                                  c.image_std);
  const size_t plane = static_cast<size_t>(ow) * oh;
  std::vector<float> out(3 * plane);  // F32 [3, oh, ow]
  for (size_t i = 0; i < plane; ++i) {
    for (int ch = 0; ch < 3; ++ch) out[ch * plane + i] = normalize(crop.pixels[i * 3 + ch], ch);
  }
  return out;
}

absl::StatusOr<std::vector<float>> ClipPreprocess(const RgbImage& img, int size) {
  if (absl::Status s = CheckSize("crop size", size); !s.ok()) return s;
  return ClipPreprocess(img, ClipImageProcessorConfig(size));
}

}  // namespace hap
