// EncodePng / WritePng over libpng's write API with an in-memory sink.
#include "runtime/image/png_encode.h"

#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace hap {

namespace {

struct PngSink {
  std::string data;
  char message[256] = {};
  std::vector<png_bytep> rows;
};

void ErrorFn(png_structp png, png_const_charp msg) {
  auto* sink = static_cast<PngSink*>(png_get_error_ptr(png));
  std::snprintf(sink->message, sizeof(sink->message), "%s", msg);
  png_longjmp(png, 1);
}

void WarningFn(png_structp, png_const_charp) {}

void WriteFn(png_structp png, png_bytep data, png_size_t length) {
  static_cast<PngSink*>(png_get_io_ptr(png))
      ->data.append(reinterpret_cast<const char*>(data), length);
}

void FlushFn(png_structp) {}

// setjmp lives here with only trivially destructible locals; the sink owns all buffers.
bool EncodeInner(png_structp png, png_infop info, const RgbImage& img, PngSink* sink) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_write_fn(png, sink, WriteFn, FlushFn);
  png_set_IHDR(png, info, img.width, img.height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, sink->rows.data());
  png_write_end(png, nullptr);
  return true;
}

}  // namespace

absl::StatusOr<std::string> EncodePng(const RgbImage& img) {
  if (img.width <= 0 || img.height <= 0 ||
      img.pixels.size() != static_cast<size_t>(img.width) * img.height * 3) {
    return absl::InvalidArgumentError(absl::StrCat("cannot encode a ", img.width, "x", img.height,
                                                   " image with ", img.pixels.size(),
                                                   " bytes of RGB pixels"));
  }
  PngSink sink;
  sink.rows.resize(img.height);
  for (int y = 0; y < img.height; ++y) {
    // libpng's API takes non-const rows, but the write path only reads them.
    sink.rows[y] =
        const_cast<png_bytep>(img.pixels.data() + static_cast<size_t>(y) * img.width * 3);
  }
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &sink, ErrorFn, WarningFn);
  if (png == nullptr) return absl::ResourceExhaustedError("cannot initialise libpng");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    return absl::ResourceExhaustedError("cannot initialise libpng");
  }
  const bool ok = EncodeInner(png, info, img, &sink);
  png_destroy_write_struct(&png, &info);
  if (!ok) return absl::InternalError(absl::StrCat("PNG encoding failed: ", sink.message));
  return std::move(sink.data);
}

absl::Status WritePng(const std::string& path, const RgbImage& img) {
  HAP_ASSIGN_OR_RETURN(const std::string png, EncodePng(img));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(png.data(), static_cast<std::streamsize>(png.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write PNG ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::string> PatternPng(int size) {
  RgbImage img;
  img.width = img.height = size;
  img.pixels.resize(static_cast<size_t>(std::max(size, 0)) * std::max(size, 0) * 3);
  for (size_t i = 0; i < img.pixels.size(); ++i) {
    img.pixels[i] = static_cast<uint8_t>((i * 37 + i / 301 * 11) % 253);
  }
  return EncodePng(img);
}

}  // namespace hap
