// JPEG decoding with libjpeg(-turbo), the library PIL uses, with the same settings PIL uses
// (ISLOW IDCT, fancy upsampling), so decoded pixels match PIL's exactly.
#include <csetjmp>
#include <cstring>

// jpeglib.h uses FILE and size_t without including their headers, so the order matters.
// clang-format off
#include <cstdio>
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/image/codecs.h"

namespace hap::image_internal {

namespace {

// A progressive JPEG can carry thousands of tiny scans that each cost a full pass over the
// coefficients; real encoders emit < 20. Refusing more bounds decode time on hostile input.
constexpr int kMaxProgressiveScans = 500;

// State shared with libjpeg's callbacks. libjpeg reports fatal errors through error_exit,
// which must not return: we longjmp back into DecodeJpegInner. Everything longjmp crosses is
// plain C data, and the buffers live in the caller's frame, so no destructor is skipped.
struct JpegContext {
  jpeg_error_mgr err;  // first member: libjpeg hands callbacks a jpeg_error_mgr*
  jpeg_progress_mgr progress;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool header_read = false;
  int64_t width = 0, height = 0;
  bool too_many_pixels = false;
  bool cmyk = false;
};

JpegContext* ContextOf(j_common_ptr cinfo) { return reinterpret_cast<JpegContext*>(cinfo->err); }

[[noreturn]] void ErrorExit(j_common_ptr cinfo) {
  JpegContext* ctx = ContextOf(cinfo);
  (*cinfo->err->format_message)(cinfo, ctx->message);
  std::longjmp(ctx->jump, 1);
}

// Warnings (level -1) are ignored as PIL ignores them, except running out of data: libjpeg
// would pad the image with grey, whereas PIL refuses a truncated file, and so do we.
void EmitMessage(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    ErrorExit(cinfo);
  }
}

void OutputMessage(j_common_ptr) {}  // never print to stderr from a server

void ProgressMonitor(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (!cinfo->is_decompressor || d->input_scan_number <= kMaxProgressiveScans) return;
  JpegContext* ctx = ContextOf(cinfo);
  std::snprintf(ctx->message, sizeof(ctx->message), "more than %d progressive scans",
                kMaxProgressiveScans);
  std::longjmp(ctx->jump, 1);
}

// PIL's cmyk2rgb: with nk = 255 - K, each channel is nk - round(C * nk / 255), using the
// exact (x + (x >> 8)) >> 8 division by 255 of x + 128.
uint8_t CmykChannel(uint8_t c, uint8_t k) {
  const int nk = 255 - k;
  const int t = c * nk + 128;
  const int v = nk - (((t >> 8) + t) >> 8);
  return static_cast<uint8_t>(v < 0 ? 0 : v);
}

// Decodes into `out` (sized here). Returns false after a libjpeg error (message in ctx) or a
// limit violation (ctx->too_many_pixels).
bool DecodeJpegInner(jpeg_decompress_struct* cinfo, JpegContext* ctx, std::string_view bytes,
                     const ImageLimits& limits, bool header_only, RgbImage* out,
                     std::vector<uint8_t>* row) {
  if (setjmp(ctx->jump)) return false;
  jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(cinfo, TRUE);
  ctx->header_read = true;
  ctx->width = cinfo->image_width;
  ctx->height = cinfo->image_height;
  if (ctx->width * ctx->height > limits.max_pixels) {
    ctx->too_many_pixels = true;
    return false;
  }
  if (header_only) {
    out->width = static_cast<int>(ctx->width);
    out->height = static_cast<int>(ctx->height);
    return true;
  }
  // Grey and YCbCr/RGB are converted to RGB by libjpeg. CMYK and YCCK (Adobe) are converted
  // here rather than refused: libjpeg yields CMYK for both, stored inverted by Adobe's
  // convention (PIL's "CMYK;I" raw mode), and PIL's cmyk2rgb turns that into RGB.
  switch (cinfo->jpeg_color_space) {
    case JCS_CMYK:
    case JCS_YCCK:
      cinfo->out_color_space = JCS_CMYK;
      ctx->cmyk = true;
      break;
    default:
      cinfo->out_color_space = JCS_RGB;
  }
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  jpeg_start_decompress(cinfo);
  const int components = ctx->cmyk ? 4 : 3;
  if (cinfo->output_components != components) {
    std::snprintf(ctx->message, sizeof(ctx->message), "unexpected %d output components",
                  cinfo->output_components);
    return false;
  }
  const size_t w = cinfo->output_width;
  out->width = static_cast<int>(w);
  out->height = static_cast<int>(cinfo->output_height);
  out->pixels.resize(w * cinfo->output_height * 3);
  if (ctx->cmyk) row->resize(w * 4);
  while (cinfo->output_scanline < cinfo->output_height) {
    const size_t y = cinfo->output_scanline;
    JSAMPROW dst = ctx->cmyk ? row->data() : out->pixels.data() + y * w * 3;
    jpeg_read_scanlines(cinfo, &dst, 1);
    if (ctx->cmyk) {
      uint8_t* rgb = out->pixels.data() + y * w * 3;
      for (size_t x = 0; x < w; ++x) {
        const uint8_t* p = row->data() + x * 4;
        // Inverted storage: the ink amounts are 255 - stored value.
        const uint8_t k = 255 - p[3];
        for (int c = 0; c < 3; ++c) rgb[x * 3 + c] = CmykChannel(255 - p[c], k);
      }
    }
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

}  // namespace

absl::StatusOr<RgbImage> DecodeJpeg(std::string_view bytes, const ImageLimits& limits,
                                    bool header_only) {
  jpeg_decompress_struct cinfo;
  JpegContext ctx;
  std::memset(ctx.message, 0, sizeof(ctx.message));
  cinfo.err = jpeg_std_error(&ctx.err);
  ctx.err.error_exit = ErrorExit;
  ctx.err.emit_message = EmitMessage;
  ctx.err.output_message = OutputMessage;
  // jpeg_create_decompress can itself fail (out of memory) through error_exit.
  if (setjmp(ctx.jump)) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot initialise libjpeg: ", ctx.message));
  }
  jpeg_create_decompress(&cinfo);
  ctx.progress.progress_monitor = ProgressMonitor;
  cinfo.progress = &ctx.progress;

  RgbImage out;
  std::vector<uint8_t> row;
  const bool ok = DecodeJpegInner(&cinfo, &ctx, bytes, limits, header_only, &out, &row);
  jpeg_destroy_decompress(&cinfo);
  if (ctx.too_many_pixels) {
    return CheckPixelLimit("JPEG", ctx.width, ctx.height, limits);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx.header_read ? "corrupt or truncated JPEG data: " : "invalid JPEG header: ",
                     ctx.message));
  }
  return out;
}

}  // namespace hap::image_internal
