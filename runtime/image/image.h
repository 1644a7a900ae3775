// Decoded images and the limits every decoder enforces on untrusted input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace hap {

// Bounds checked before any pixel is decoded, so a hostile upload cannot make the server
// allocate more than about max_pixels * 7 bytes.
struct ImageLimits {
  int64_t max_bytes = 32 << 20;     // encoded size
  int64_t max_pixels = 40'000'000;  // width * height, read from the header
};

struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;  // U8 [height, width, 3], RGB row-major
};

// Sniffs JPEG or PNG from the magic bytes and decodes to RGB8; alpha is composited over white
// exactly as PIL's Image.alpha_composite onto an opaque white background (what llava-hf's
// processor and llava_model.preprocess do).
// Errors: InvalidArgument for empty, unsupported (GIF/BMP/WebP/...), unrecognised, corrupt or
// truncated data; ResourceExhausted when the data exceeds max_bytes or the header's
// width * height exceeds max_pixels.
absl::StatusOr<RgbImage> DecodeImage(std::string_view bytes, const ImageLimits& limits);

struct ImageSize {
  int width = 0, height = 0;
};
// The size DecodeImage gives `bytes`, read from the header alone (no pixel is decoded), with
// DecodeImage's format and limit checks; data corrupt past the header is found only by
// DecodeImage. What a budget stated against an image's size needs before the image is decoded.
absl::StatusOr<ImageSize> ReadImageSize(std::string_view bytes, const ImageLimits& limits);

// Reads `path` (refusing files over max_bytes before reading them) and decodes it. Errors
// name the path; NotFound when it does not exist.
absl::StatusOr<RgbImage> ReadImageFile(const std::string& path, const ImageLimits& limits);

}  // namespace hap
