// ResizeRegion: PIL's Resample.c algorithm, re-derived (see resize.h for the definition).
#include "runtime/image/resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace hap {

namespace {

constexpr int kPrecisionBits = 22;  // 32 - 8 - 2: 8 bits of pixel, 2 of kernel overshoot

// Keys' cubic convolution kernel with a = -0.5, evaluated in PIL's operation order (the
// order matters for bit-exact coefficients). Non-zero on (-2, 2).
double Cubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// The triangle kernel, non-zero on (-1, 1).
double Triangle(double x) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return 1.0 - x;
  return 0.0;
}

struct Filter {
  double (*kernel)(double);
  double support;
};

Filter FilterOf(ResampleFilter f) {
  return f == ResampleFilter::kBilinear ? Filter{Triangle, 1.0} : Filter{Cubic, 2.0};
}

// Fixed-point taps of a run of output samples along one axis.
struct Taps {
  int ksize = 0;                 // taps stored per output sample
  std::vector<int64_t> first;    // first input index of each output sample
  std::vector<int> count;        // taps used (<= ksize)
  std::vector<int32_t> weights;  // [n_out, ksize], Q22
};

// Taps of outputs [out0, out0 + n) of resizing in_size samples to out_size.
Taps ComputeTaps(const Filter& filter, int64_t in_size, int64_t out_size, int64_t out0, int n) {
  // PIL passes the box edges as C floats; in_size - 0 is exact for any real image size.
  const double scale = static_cast<double>(static_cast<float>(in_size)) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = filter.support * filterscale;
  Taps t;
  t.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(n);
  t.count.resize(n);
  t.weights.assign(static_cast<size_t>(n) * t.ksize, 0);
  std::vector<double> k(t.ksize);
  for (int i = 0; i < n; ++i) {
    const double center = (static_cast<double>(out0 + i) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    // Truncation toward zero, then clamping, as PIL's "(int)(x + 0.5)" rounding.
    int64_t xmin = static_cast<int64_t>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int64_t xmax = static_cast<int64_t>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    const int count = static_cast<int>(xmax - xmin);
    double ww = 0.0;
    for (int x = 0; x < count; ++x) {
      k[x] = filter.kernel((static_cast<double>(x + xmin) - center + 0.5) * ss);
      ww += k[x];
    }
    int32_t* w = &t.weights[static_cast<size_t>(i) * t.ksize];
    for (int x = 0; x < count; ++x) {
      const double v = ww != 0.0 ? k[x] / ww : k[x];
      // Round half away from zero into Q22.
      w[x] = static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits)
                                        : 0.5 + v * (1 << kPrecisionBits));
    }
    t.first[i] = xmin;
    t.count[i] = count;
  }
  return t;
}

// Q22 accumulator (with the rounding half added) → uint8, clipping as PIL's lookup table.
uint8_t Clip8(int64_t acc) {
  const int64_t v = acc >> kPrecisionBits;  // arithmetic shift: floor
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// Selects input rows [row0, row0 + n_rows), horizontally resampled to output columns
// [x0, x0 + w) of a width-out_w image (or copied when the width is unchanged).
std::vector<uint8_t> HorizontalPass(const RgbImage& in, const Filter& filter, int64_t out_w,
                                    int64_t x0, int w, int64_t row0, int64_t n_rows) {
  std::vector<uint8_t> out(static_cast<size_t>(n_rows) * w * 3);
  const size_t in_stride = static_cast<size_t>(in.width) * 3;
  if (out_w == in.width) {
    for (int64_t y = 0; y < n_rows; ++y) {
      std::copy_n(in.pixels.data() + (row0 + y) * in_stride + x0 * 3, static_cast<size_t>(w) * 3,
                  out.data() + y * w * 3);
    }
    return out;
  }
  const Taps t = ComputeTaps(filter, in.width, out_w, x0, w);
  for (int64_t y = 0; y < n_rows; ++y) {
    const uint8_t* src = in.pixels.data() + (row0 + y) * in_stride;
    uint8_t* dst = out.data() + y * w * 3;
    for (int x = 0; x < w; ++x) {
      const int32_t* k = &t.weights[static_cast<size_t>(x) * t.ksize];
      const uint8_t* p = src + t.first[x] * 3;
      int64_t acc[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1),
                        1 << (kPrecisionBits - 1)};
      for (int j = 0; j < t.count[x]; ++j) {
        for (int c = 0; c < 3; ++c) acc[c] += static_cast<int64_t>(p[j * 3 + c]) * k[j];
      }
      for (int c = 0; c < 3; ++c) dst[x * 3 + c] = Clip8(acc[c]);
    }
  }
  return out;
}

}  // namespace

RgbImage ResizeRegion(const RgbImage& in, ResampleFilter filter_id, int64_t out_w, int64_t out_h,
                      int64_t x0, int64_t y0, int w, int h) {
  const Filter filter = FilterOf(filter_id);
  RgbImage out;
  if (in.width <= 0 || in.height <= 0 ||
      in.pixels.size() != static_cast<size_t>(in.width) * in.height * 3 || out_w <= 0 ||
      out_h <= 0 || w <= 0 || h <= 0 || x0 < 0 || y0 < 0 || x0 + w > out_w || y0 + h > out_h) {
    return out;
  }
  out.width = w;
  out.height = h;
  const size_t row_bytes = static_cast<size_t>(w) * 3;

  if (out_h == in.height) {  // no vertical pass: only rows y0.. are needed
    out.pixels = HorizontalPass(in, filter, out_w, x0, w, y0, h);
    return out;
  }
  const Taps v = ComputeTaps(filter, in.height, out_h, y0, h);
  // Input rows the vertical taps reach; the horizontal pass runs on those only.
  const int64_t row0 = v.first.front();
  const int64_t row_end = v.first.back() + v.count.back();
  const std::vector<uint8_t> tmp = HorizontalPass(in, filter, out_w, x0, w, row0, row_end - row0);

  out.pixels.resize(static_cast<size_t>(h) * row_bytes);
  std::vector<int64_t> acc(row_bytes);
  for (int y = 0; y < h; ++y) {
    const int32_t* k = &v.weights[static_cast<size_t>(y) * v.ksize];
    std::fill(acc.begin(), acc.end(), int64_t{1} << (kPrecisionBits - 1));
    for (int j = 0; j < v.count[y]; ++j) {
      const uint8_t* src = tmp.data() + (v.first[y] - row0 + j) * row_bytes;
      for (size_t i = 0; i < row_bytes; ++i) acc[i] += static_cast<int64_t>(src[i]) * k[j];
    }
    uint8_t* dst = out.pixels.data() + y * row_bytes;
    for (size_t i = 0; i < row_bytes; ++i) dst[i] = Clip8(acc[i]);
  }
  return out;
}

RgbImage Resize(const RgbImage& in, ResampleFilter filter, int out_w, int out_h) {
  return ResizeRegion(in, filter, out_w, out_h, 0, 0, out_w, out_h);
}

RgbImage ResizeBicubicRegion(const RgbImage& in, int64_t out_w, int64_t out_h, int64_t x0,
                             int64_t y0, int w, int h) {
  return ResizeRegion(in, ResampleFilter::kBicubic, out_w, out_h, x0, y0, w, h);
}

RgbImage ResizeBicubic(const RgbImage& in, int out_w, int out_h) {
  return Resize(in, ResampleFilter::kBicubic, out_w, out_h);
}

}  // namespace hap
