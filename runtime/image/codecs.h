// Per-format decoders behind DecodeImage (internal to runtime/image).
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/image/image.h"

namespace hap::image_internal {

// `bytes` starts with the format's signature and is within limits.max_bytes. header_only: stop
// after the header, with the size and limits checked and no pixel decoded (`pixels` empty).
absl::StatusOr<RgbImage> DecodeJpeg(std::string_view bytes, const ImageLimits& limits,
                                    bool header_only = false);
absl::StatusOr<RgbImage> DecodePng(std::string_view bytes, const ImageLimits& limits,
                                   bool header_only = false);

// ResourceExhausted when width * height exceeds limits.max_pixels.
absl::Status CheckPixelLimit(const char* format, int64_t width, int64_t height,
                             const ImageLimits& limits);

}  // namespace hap::image_internal
