// Bicubic resampling bit-exact with PIL's Image.resize(..., Image.BICUBIC, reducing_gap=None).
#pragma once

#include <cstdint>

#include "runtime/image/image.h"

namespace hap {

// PIL's separable convolution resampler on RGB8: cubic kernel with a = -0.5, support 2 scaled
// by the downscale factor (antialiasing), coefficients normalised to sum 1 and rounded to
// fixed point with 22 fraction bits; horizontal pass, then vertical, each rounding and
// clipping to uint8. A pass whose size is unchanged is skipped, as PIL skips it.
// Requires a non-empty `in` and out_w, out_h > 0; otherwise returns an empty image.
RgbImage ResizeBicubic(const RgbImage& in, int out_w, int out_h);

// The [x0, x0 + w) x [y0, y0 + h) window of ResizeBicubic(in, out_w, out_h), computed without
// producing the rest of the output (a 1 x 40000 image resized to 336 high would otherwise need
// a 13-million-pixel-wide intermediate). Same requirements; the window must lie inside the
// output.
RgbImage ResizeBicubicRegion(const RgbImage& in, int64_t out_w, int64_t out_h, int64_t x0,
                             int64_t y0, int w, int h);

}  // namespace hap
