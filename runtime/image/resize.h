// Bicubic and bilinear resampling bit-exact with PIL's Image.resize(..., reducing_gap=None).
#pragma once

#include <cstdint>

#include "runtime/image/image.h"

namespace hap {

// PIL's resampling filters that ResizeRegion implements, numbered as PIL numbers them (the
// "resample" of a preprocessor_config.json).
enum class ResampleFilter {
  kBilinear = 2,  // triangle kernel, support 1
  kBicubic = 3,   // cubic kernel with a = -0.5, support 2
};

// PIL's separable convolution resampler on RGB8: the filter's kernel with its support scaled
// by the downscale factor (antialiasing), coefficients normalised to sum 1 and rounded to
// fixed point with 22 fraction bits; horizontal pass, then vertical, each rounding and
// clipping to uint8. A pass whose size is unchanged is skipped, as PIL skips it.
// The [x0, x0 + w) x [y0, y0 + h) window of the out_w x out_h result is computed without
// producing the rest of the output (a 1 x 40000 image resized to 336 high would otherwise need
// a 13-million-pixel-wide intermediate).
// Requires a non-empty `in`, out_w, out_h, w, h > 0 and the window inside the output;
// otherwise returns an empty image.
RgbImage ResizeRegion(const RgbImage& in, ResampleFilter filter, int64_t out_w, int64_t out_h,
                      int64_t x0, int64_t y0, int w, int h);

// The whole out_w x out_h image: ResizeRegion over the full window.
RgbImage Resize(const RgbImage& in, ResampleFilter filter, int out_w, int out_h);

// Bicubic shorthands (the CLIP processor's default filter).
RgbImage ResizeBicubic(const RgbImage& in, int out_w, int out_h);
RgbImage ResizeBicubicRegion(const RgbImage& in, int64_t out_w, int64_t out_h, int64_t x0,
                             int64_t y0, int w, int h);

}  // namespace hap
