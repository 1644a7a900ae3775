// PNG encoding of RGB8 images (explain heat maps, debugging dumps, a fixed test pattern).
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

// A size×size PNG of a fixed, non-repeating colour pattern: an image whose visual tokens differ
// from each other, so pruning methods have something to choose between. What a service's warm-up
// request encodes, and what the tests and the GPU benchmark send.
absl::StatusOr<std::string> PatternPng(int size);

}  // namespace hap
