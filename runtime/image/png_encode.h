// PNG encoding of RGB8 images (explain heat maps, debugging dumps).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/image/image.h"

namespace hap {

// 8-bit RGB, non-interlaced PNG. InvalidArgument for an empty or inconsistent image.
absl::StatusOr<std::string> EncodePng(const RgbImage& img);
// EncodePng, written to `path`; errors name the path.
absl::Status WritePng(const std::string& path, const RgbImage& img);

}  // namespace hap
