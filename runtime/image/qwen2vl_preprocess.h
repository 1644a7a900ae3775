// Qwen2-VL / Qwen2.5-VL image preprocessing (transformers' Qwen2VLImageProcessor, the slow PIL
// path): dynamic resolution by smart_resize, PIL resampling, rescale and normalisation, then the
// image cut into temporal x spatial patches in the order the vision tower reads them.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/image/image.h"
#include "runtime/image/resize.h"

namespace hap {

// The Qwen2VLImageProcessor settings; the defaults are its own (what a preprocessor_config.json
// without the key gets).
struct Qwen2VLImageProcessorConfig {
  bool do_resize = true;
  // Pixel budget of the resized image: size.shortest_edge / size.longest_edge, overridden by
  // min_pixels / max_pixels where a file gives them (Qwen2.5-VL ships 3136 and 12845056).
  int64_t min_pixels = 56 * 56;
  int64_t max_pixels = 28 * 28 * 1280;
  int patch_size = 14;
  int temporal_patch_size = 2;
  int merge_size = 2;
  ResampleFilter resample = ResampleFilter::kBicubic;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<double, 3> image_mean = {0.48145466, 0.4578275, 0.40821073};
  std::array<double, 3> image_std = {0.26862954, 0.26130258, 0.27577711};
  bool do_convert_rgb = true;  // decoding always yields RGB; kept for the round trip
};

// The patch grid of one image: t frames of temporal_patch_size, h x w patches of patch_size.
struct ImageGrid {
  int t = 0;
  int h = 0;
  int w = 0;
  int64_t patches() const { return static_cast<int64_t>(t) * h * w; }
};

struct ResizedSize {
  int height = 0;
  int width = 0;
};

// transformers' smart_resize: height and width rounded to multiples of `factor` (Python's
// round, ties to even), then scaled down (floor) or up (ceil) to keep the area within
// [min_pixels, max_pixels] at the aspect ratio. InvalidArgument when the aspect ratio exceeds
// 200 (as transformers raises), for non-positive sizes and for a budget with min > max.
absl::StatusOr<ResizedSize> SmartResize(int height, int width, int factor, int64_t min_pixels,
                                        int64_t max_pixels);

struct Qwen2VLPixels {
  // F32 [grid.patches(), 3 * temporal_patch_size * patch_size * patch_size]. Rows run over
  // (t, h / merge, w / merge, merge row, merge column), so each merge_size x merge_size group of
  // patches that the merger joins is consecutive; a row holds (channel, frame, y, x).
  std::vector<float> pixel_values;
  ImageGrid grid;
  ResizedSize resized;  // the image size the patches cover
};

// One image as the processor makes it: the single frame repeated to temporal_patch_size.
// Without do_resize the image sides must be multiples of patch_size * merge_size.
// InvalidArgument names the reason (bad image, aspect ratio, config values).
absl::StatusOr<Qwen2VLPixels> Qwen2VLPreprocess(const RgbImage& img,
                                                const Qwen2VLImageProcessorConfig& config);

}  // namespace hap
