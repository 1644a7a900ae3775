// DecodeImage / ReadImageFile: size limits, format sniffing and dispatch to the codecs.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "runtime/image/codecs.h"
#include "runtime/image/image.h"

namespace hap {

namespace image_internal {

absl::Status CheckPixelLimit(const char* format, int64_t width, int64_t height,
                             const ImageLimits& limits) {
  // A PNG header holds 32-bit sizes, so the product can pass 2^63: that is over any limit too.
  int64_t pixels = 0;
  if (__builtin_mul_overflow(width, height, &pixels) || pixels > limits.max_pixels) {
    return absl::ResourceExhaustedError(absl::StrCat(
        format, " image is ", width, "x", height, " = ", static_cast<uint64_t>(width) * height,
        " pixels; the limit is ", limits.max_pixels, " pixels"));
  }
  return absl::OkStatus();
}

}  // namespace image_internal

namespace {

bool StartsWith(std::string_view bytes, std::string_view magic) {
  return bytes.size() >= magic.size() && bytes.substr(0, magic.size()) == magic;
}

constexpr char kSupported[] = "supported formats: JPEG, PNG";

// Formats people commonly upload that we recognise but do not decode.
const char* KnownUnsupportedFormat(std::string_view b) {
  if (StartsWith(b, "GIF87a") || StartsWith(b, "GIF89a")) return "GIF";
  if (StartsWith(b, "BM")) return "BMP";
  if (StartsWith(b, "RIFF") && b.size() >= 12 && b.substr(8, 4) == "WEBP") return "WebP";
  if (StartsWith(b, std::string_view("II*\0", 4)) || StartsWith(b, std::string_view("MM\0*", 4))) {
    return "TIFF";
  }
  if (b.size() >= 12 && b.substr(4, 4) == "ftyp") return "HEIF/AVIF";
  return nullptr;
}

std::string FirstBytesHex(std::string_view b) {
  std::string out;
  for (size_t i = 0; i < b.size() && i < 8; ++i) {
    absl::StrAppendFormat(&out, "%s%02x", i ? " " : "", static_cast<uint8_t>(b[i]));
  }
  return out;
}

// DecodeImage, or with header_only its checks up to the header (the size, no pixels).
absl::StatusOr<RgbImage> Decode(std::string_view bytes, const ImageLimits& limits,
                                bool header_only) {
  if (bytes.empty()) return absl::InvalidArgumentError("image is empty");
  if (static_cast<int64_t>(bytes.size()) > limits.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "image is ", bytes.size(), " bytes; the limit is ", limits.max_bytes, " bytes"));
  }
  if (StartsWith(bytes, "\xFF\xD8\xFF")) {
    return image_internal::DecodeJpeg(bytes, limits, header_only);
  }
  if (StartsWith(bytes, "\x89PNG\r\n\x1A\n")) {
    return image_internal::DecodePng(bytes, limits, header_only);
  }
  if (const char* name = KnownUnsupportedFormat(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported image format ", name, "; ", kSupported));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported image format: unrecognised data (",
                                                 bytes.size(), " bytes starting ",
                                                 FirstBytesHex(bytes), "); ", kSupported));
}

}  // namespace

absl::StatusOr<RgbImage> DecodeImage(std::string_view bytes, const ImageLimits& limits) {
  return Decode(bytes, limits, /*header_only=*/false);
}

absl::StatusOr<ImageSize> ReadImageSize(std::string_view bytes, const ImageLimits& limits) {
  HAP_ASSIGN_OR_RETURN(RgbImage header, Decode(bytes, limits, /*header_only=*/true));
  return ImageSize{header.width, header.height};
}

absl::StatusOr<RgbImage> ReadImageFile(const std::string& path, const ImageLimits& limits) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat("cannot open image ", path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::InvalidArgumentError(msg);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("image ", path, " is not a regular file"));
  }
  if (st.st_size > limits.max_bytes) {
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat(
        "image ", path, " is ", st.st_size, " bytes; the limit is ", limits.max_bytes, " bytes"));
  }
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = read(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "file shrank while reading";
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat("cannot read image ", path, ": ", why));
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  absl::StatusOr<RgbImage> image = DecodeImage(data, limits);
  if (!image.ok()) {
    return absl::Status(image.status().code(), absl::StrCat(path, ": ", image.status().message()));
  }
  return image;
}

}  // namespace hap
