// CLIP image preprocessing of the llava-hf processor (docs/design.md §2; llava_model.preprocess).
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "runtime/image/image.h"

namespace hap {

inline constexpr float kClipMean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
inline constexpr float kClipStd[3] = {0.26862954f, 0.26130258f, 0.27577711f};

// F32 [3, size, size] CHW: bicubic resize of the shortest edge to `size` (long edge
// int(size * long / short)), centre crop (top = (h - size) / 2, left = (w - size) / 2),
// x / 255, then (x - mean) / std per channel, all in float32 as numpy does.
// InvalidArgument for an empty/inconsistent image, size outside 1..4096, or an aspect ratio so
// extreme that the resized long edge does not fit in an int.
absl::StatusOr<std::vector<float>> ClipPreprocess(const RgbImage& img, int size);

}  // namespace hap
