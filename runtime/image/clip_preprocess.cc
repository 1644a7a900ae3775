// ClipPreprocess: resize + centre crop (only the crop is resampled) + CLIP normalisation.
#include "runtime/image/clip_preprocess.h"

#include <climits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/image/resize.h"

namespace hap {

namespace {
constexpr int kMaxClipSize = 4096;
}  // namespace

absl::StatusOr<std::vector<float>> ClipPreprocess(const RgbImage& img, int size) {
  // Vision towers use 224..1024; the bound keeps a bad config from allocating gigabytes.
  if (size <= 0 || size > kMaxClipSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("crop size ", size, " is outside 1..", kMaxClipSize));
  }
  if (img.width <= 0 || img.height <= 0 ||
      img.pixels.size() != static_cast<size_t>(img.width) * img.height * 3) {
    return absl::InvalidArgumentError(absl::StrCat("bad image: ", img.width, "x", img.height,
                                                   " with ", img.pixels.size(), " bytes"));
  }
  const int64_t w = img.width, h = img.height;
  const int64_t short_side = std::min(w, h), long_side = std::max(w, h);
  // Python's int(size * long / short): exact integer product, correctly rounded true
  // division (both operands < 2^53, so the double division rounds identically), truncation.
  const double new_long_f = static_cast<double>(size * long_side) / static_cast<double>(short_side);
  if (new_long_f >= static_cast<double>(INT_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("image aspect ratio ", w, "x", h, " is too extreme to resize"));
  }
  const int64_t new_long = static_cast<int64_t>(new_long_f);
  const int64_t nw = w <= h ? size : new_long;
  const int64_t nh = w <= h ? new_long : size;
  const int64_t top = (nh - size) / 2, left = (nw - size) / 2;  // both >= 0
  const RgbImage crop = ResizeBicubicRegion(img, nw, nh, left, top, size, size);

  const size_t plane = static_cast<size_t>(size) * size;
  std::vector<float> out(3 * plane);  // F32 [3, size, size]
  for (size_t i = 0; i < plane; ++i) {
    for (int c = 0; c < 3; ++c) {
      const float x = static_cast<float>(crop.pixels[i * 3 + c]) / 255.0f;
      out[c * plane + i] = (x - kClipMean[c]) / kClipStd[c];
    }
  }
  return out;
}

}  // namespace hap
