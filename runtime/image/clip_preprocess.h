// CLIP image preprocessing of the llava-hf processor (transformers' CLIPImageProcessor, as set by
// a checkpoint's preprocessor_config.json; docs/design.md §2; llava_model.preprocess).
#pragma once

#include <array>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/image/image.h"
#include "runtime/image/resize.h"

namespace hap {

inline constexpr float kClipMean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
inline constexpr float kClipStd[3] = {0.26862954f, 0.26130258f, 0.27577711f};

// The CLIPImageProcessor settings. The defaults are CLIPImageProcessor's own (what a
// preprocessor_config.json without the key gets): 224 px, bicubic, CLIP mean/std.
struct ImageProcessorConfig {
  bool do_resize = true;
  // size: {"shortest_edge": s} resizes the short edge to s and the long edge to
  // int(s * long / short); {"height", "width"} resizes to exactly that. shortest_edge > 0
  // selects the first form, else resize_height x resize_width.
  int shortest_edge = 224;
  int resize_height = 0;
  int resize_width = 0;
  ResampleFilter resample = ResampleFilter::kBicubic;
  bool do_center_crop = true;
  int crop_height = 224;
  int crop_width = 224;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  // As written in the file (transformers normalises with them cast to float32).
  std::array<double, 3> image_mean = {0.48145466, 0.4578275, 0.40821073};
  std::array<double, 3> image_std = {0.26862954, 0.26130258, 0.27577711};
  // Decoding always yields RGB (DecodeImage converts grey, palette and CMYK, and composites
  // alpha over white), so this is recorded for the round trip only.
  bool do_convert_rgb = true;
};

// What llava-hf ships for a CLIP tower of `size` px: shortest_edge = crop = size, bicubic,
// rescale 1/255, CLIP mean/std (llava-hf/llava-1.5-7b-hf at size 336).
ImageProcessorConfig ClipImageProcessorConfig(int size);

// F32 [3, H, W] CHW as CLIPImageProcessor.preprocess computes it, H x W being the crop (or,
// without a crop, the resized image):
//   resize (if do_resize; PIL's filter, reducing_gap=None), centre crop (if do_center_crop;
//   top = (h - crop_h) / 2, left = (w - crop_w) / 2; only the crop is resampled),
//   x = float32(double(u8) * rescale_factor) (if do_rescale, else float32(u8)),
//   (x - mean) / std per channel in float32 (if do_normalize).
// InvalidArgument for an empty/inconsistent image, sizes outside 1..4096, an aspect ratio so
// extreme that the resized long edge does not fit in an int, and a crop larger than the
// (resized) image, which transformers would zero-pad.
absl::StatusOr<std::vector<float>> ClipPreprocess(const RgbImage& img,
                                                  const ImageProcessorConfig& config);

// ClipPreprocess with ClipImageProcessorConfig(size): F32 [3, size, size].
absl::StatusOr<std::vector<float>> ClipPreprocess(const RgbImage& img, int size);

}  // namespace hap
