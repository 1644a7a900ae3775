// Qwen2VLPreprocess: smart_resize, PIL resampling, PixelNormalizer, patch layout.
#include "runtime/image/qwen2vl_preprocess.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/image/pixel_normalize.h"

namespace hap {
namespace {

// qwen-vl-utils' MAX_PIXELS (16384 patches of 28 x 28): larger budgets are configuration
// mistakes, and the bound keeps one request from asking for gigabytes of pixel values.
constexpr int64_t kMaxPixelBudget = int64_t{16384} * 28 * 28;

}  // namespace

absl::StatusOr<ResizedSize> SmartResize(int height, int width, int factor, int64_t min_pixels,
                                        int64_t max_pixels) {
  if (height <= 0 || width <= 0 || factor <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("smart_resize of a ", width, "x", height, " image with factor ", factor));
  }
  if (min_pixels > max_pixels) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_pixels ", min_pixels, " is larger than max_pixels ", max_pixels));
  }
  const double h = height, w = width, f = factor;
  const double ratio = std::max(h, w) / std::min(h, w);
  if (ratio > 200) {
    return absl::InvalidArgumentError(
        absl::StrCat("the image is ", width, "x", height, ": its aspect ratio ", ratio,
                     " is above 200, which Qwen2-VL's processor refuses"));
  }
  // std::nearbyint under the default rounding mode rounds ties to even, as Python's round.
  int64_t h_bar = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
  int64_t w_bar = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(h * w / static_cast<double>(max_pixels));
    h_bar = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return ResizedSize{static_cast<int>(h_bar), static_cast<int>(w_bar)};
}

absl::StatusOr<Qwen2VLPixels> Qwen2VLPreprocess(const RgbImage& img,
                                                const Qwen2VLImageProcessorConfig& c) {
  if (c.patch_size <= 0 || c.merge_size <= 0 || c.temporal_patch_size <= 0 ||
      c.patch_size * c.merge_size > 1024 || c.temporal_patch_size > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("patch_size ", c.patch_size, ", merge_size ", c.merge_size,
                     ", temporal_patch_size ", c.temporal_patch_size,
                     ": expected positive values, patch_size * merge_size <= 1024 and "
                     "temporal_patch_size <= 16"));
  }
  if (c.min_pixels < 0 || c.max_pixels <= 0 || c.max_pixels > kMaxPixelBudget) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_pixels ", c.min_pixels, " / max_pixels ", c.max_pixels,
                     ": expected 0 <= min <= max <= ", kMaxPixelBudget));
  }
  if (img.width <= 0 || img.height <= 0 ||
      img.pixels.size() != static_cast<size_t>(img.width) * img.height * 3) {
    return absl::InvalidArgumentError(absl::StrCat("bad image: ", img.width, "x", img.height,
                                                   " with ", img.pixels.size(), " bytes"));
  }
  const int factor = c.patch_size * c.merge_size;
  Qwen2VLPixels out;
  RgbImage resized_image;
  const RgbImage* image = &img;
  if (c.do_resize) {
    auto size = SmartResize(img.height, img.width, factor, c.min_pixels, c.max_pixels);
    if (!size.ok()) return size.status();
    out.resized = *size;
    if (out.resized.width != img.width || out.resized.height != img.height) {
      resized_image = Resize(img, c.resample, out.resized.width, out.resized.height);
      image = &resized_image;
    }
  } else {
    if (img.height % factor != 0 || img.width % factor != 0 ||
        static_cast<int64_t>(img.height) * img.width > kMaxPixelBudget) {
      return absl::InvalidArgumentError(absl::StrCat(
          "without do_resize the image must have sides that are multiples of patch_size * "
          "merge_size = ",
          factor, " and at most ", kMaxPixelBudget, " pixels; it is ", img.width, "x", img.height));
    }
    out.resized = {img.height, img.width};
  }

  const int p = c.patch_size, m = c.merge_size, tp = c.temporal_patch_size;
  out.grid = {1, out.resized.height / p, out.resized.width / p};
  const int64_t row_size = int64_t{3} * tp * p * p;
  out.pixel_values.resize(out.grid.patches() * row_size);
  const PixelNormalizer normalize(c.do_rescale, c.rescale_factor, c.do_normalize, c.image_mean,
                                  c.image_std);
  const int64_t stride = image->width;
  float* row = out.pixel_values.data();
  for (int bh = 0; bh < out.grid.h / m; ++bh) {
    for (int bw = 0; bw < out.grid.w / m; ++bw) {
      for (int mh = 0; mh < m; ++mh) {
        for (int mw = 0; mw < m; ++mw) {
          const int64_t y0 = static_cast<int64_t>(bh * m + mh) * p;
          const int64_t x0 = static_cast<int64_t>(bw * m + mw) * p;
          for (int ch = 0; ch < 3; ++ch) {
            // The one frame, repeated to fill the temporal patch.
            float* frame = row + static_cast<int64_t>(ch) * tp * p * p;
            for (int y = 0; y < p; ++y) {
              const uint8_t* src = image->pixels.data() + ((y0 + y) * stride + x0) * 3 + ch;
              for (int x = 0; x < p; ++x) frame[y * p + x] = normalize(src[x * 3], ch);
            }
            for (int t = 1; t < tp; ++t) {
              std::copy(frame, frame + p * p, frame + static_cast<int64_t>(t) * p * p);
            }
          }
          row += row_size;
        }
      }
    }
  }
  return out;
}

}  // namespace hap
