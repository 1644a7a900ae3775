// PNG decoding with libpng: every colour type and bit depth normalised to RGB8, alpha
// composited over white bit-exactly as PIL does.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/image/codecs.h"

namespace hap::image_internal {

namespace {

// libpng reports errors through error_fn, which must not return; we longjmp to the setjmp in
// DecodePngInner via png_jmpbuf. Buffers live in the caller's frame, so no destructor is
// skipped, and the read callback below keeps only trivially destructible locals.
struct PngContext {
  std::string_view bytes;
  size_t pos = 0;
  char message[256] = {};
  bool header_read = false;
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgba;    // U8 [height, width, channels] as libpng delivers it
  std::vector<png_bytep> rows;  // row pointers into `rgba`
};

void ErrorFn(png_structp png, png_const_charp msg) {
  auto* ctx = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(ctx->message, sizeof(ctx->message), "%s", msg);
  png_longjmp(png, 1);
}

void WarningFn(png_structp, png_const_charp) {}  // benign (bad ancillary CRC, etc.)

void ReadFn(png_structp png, png_bytep out, png_size_t length) {
  auto* ctx = static_cast<PngContext*>(png_get_io_ptr(png));
  if (length > ctx->bytes.size() - ctx->pos) png_error(png, "unexpected end of data");
  std::memcpy(out, ctx->bytes.data() + ctx->pos, length);
  ctx->pos += length;
}

// PIL's Image.alpha_composite of (r, g, b, a) over opaque white, for one channel. With an
// opaque white destination its integer formula reduces to: coef1 = a * 128 (7 fraction bits),
// coef2 = (255 - a) * 128, t = v * coef1 + 255 * coef2 + 128 * 128, and the result is
// t / 255 by PIL's ((t >> 8) + t) >> 8 shift division, then >> 7. Fully transparent pixels
// become white.
uint8_t OverWhite(uint8_t v, uint8_t a) {
  if (a == 0) return 255;
  const uint32_t coef1 = static_cast<uint32_t>(a) * 128;
  const uint32_t coef2 = 255 * 128 - coef1;
  const uint32_t t = v * coef1 + 255 * coef2 + (0x80 << 7);
  return static_cast<uint8_t>((((t >> 8) + t) >> 8) >> 7);
}

bool DecodePngInner(png_structp png, png_infop info, PngContext* ctx, bool header_only,
                    int* channels) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, ctx, ReadFn);
  png_read_info(png, info);
  ctx->header_read = true;
  if (header_only) {
    ctx->width = png_get_image_width(png, info);
    ctx->height = png_get_image_height(png, info);
    return true;
  }

  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  // 16-bit samples keep their high byte (png_set_strip_16), which is what PIL's "RGB;16B" /
  // "RGBA;16B" / "LA;16B" raw modes do. (PIL clips 16-bit greyscale "I" images to 0..255
  // instead of scaling; we take the high byte there too, so an image is never blown out.)
  if (bit_depth == 16) png_set_strip_16(png);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  // 1/2/4-bit grey scales to 0..255 (x255, x85, x17), like PIL's "1", "L;2", "L;4".
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  // tRNS (palette alpha, or one transparent grey level) becomes an alpha channel. A tRNS
  // colour key on an RGB image is ignored: PIL opens that as mode "RGB", which the llava-hf
  // processor (and llava_model.preprocess) passes through without compositing.
  if (png_get_valid(png, info, PNG_INFO_tRNS) && color_type != PNG_COLOR_TYPE_RGB) {
    png_set_tRNS_to_alpha(png);
  }
  if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_gray_to_rgb(png);
  }
  png_set_interlace_handling(png);  // Adam7: libpng assembles the passes
  png_read_update_info(png, info);

  *channels = png_get_channels(png, info);
  if (*channels != 3 && *channels != 4) png_error(png, "unexpected channel count");
  const size_t rowbytes = png_get_rowbytes(png, info);
  ctx->width = png_get_image_width(png, info);
  ctx->height = png_get_image_height(png, info);
  if (rowbytes != static_cast<size_t>(ctx->width) * *channels) png_error(png, "bad row size");
  ctx->rgba.resize(rowbytes * ctx->height);
  ctx->rows.resize(ctx->height);
  for (int64_t y = 0; y < ctx->height; ++y) ctx->rows[y] = ctx->rgba.data() + y * rowbytes;
  png_read_image(png, ctx->rows.data());
  // Reads through IEND, so truncation or a bad CRC after the pixel data is still an error.
  png_read_end(png, nullptr);
  return true;
}

// Width and height straight from the IHDR chunk, which the PNG spec puts first (bytes 16..24),
// so the pixel limit is enforced before libpng reads any further chunk. A file without a
// leading IHDR is left to libpng to reject.
absl::Status CheckIhdrPixels(std::string_view bytes, const ImageLimits& limits) {
  if (bytes.size() < 24 || bytes.substr(12, 4) != "IHDR") return absl::OkStatus();
  auto be32 = [&](size_t at) {
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data()) + at;
    return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  };
  return CheckPixelLimit("PNG", be32(16), be32(20), limits);
}

}  // namespace

absl::StatusOr<RgbImage> DecodePng(std::string_view bytes, const ImageLimits& limits,
                                   bool header_only) {
  HAP_RETURN_IF_ERROR(CheckIhdrPixels(bytes, limits));
  PngContext ctx;
  ctx.bytes = bytes;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, ErrorFn, WarningFn);
  if (png == nullptr) return absl::ResourceExhaustedError("cannot initialise libpng");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return absl::ResourceExhaustedError("cannot initialise libpng");
  }
  int channels = 0;
  const bool ok = DecodePngInner(png, info, &ctx, header_only, &channels);
  png_destroy_read_struct(&png, &info, nullptr);
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        ctx.header_read ? "corrupt or truncated PNG data: " : "invalid PNG header: ", ctx.message));
  }

  RgbImage out;
  out.width = static_cast<int>(ctx.width);
  out.height = static_cast<int>(ctx.height);
  if (header_only) return out;
  const size_t n = static_cast<size_t>(ctx.width) * ctx.height;
  if (channels == 3) {
    out.pixels = std::move(ctx.rgba);
    return out;
  }
  out.pixels.resize(n * 3);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = ctx.rgba.data() + i * 4;
    for (int c = 0; c < 3; ++c) out.pixels[i * 3 + c] = OverWhite(p[c], p[3]);
  }
  return out;
}

}  // namespace hap::image_internal
