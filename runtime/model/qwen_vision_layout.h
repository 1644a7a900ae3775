// The index bookkeeping of Qwen2.5-VL's vision tower (transformers' Qwen2_5_VisionTransformer
// rot_pos_emb and get_window_index): where each patch sits on the 2-D rotary grid, and the
// order and boundaries of the attention windows. Patches arrive grouped by merge unit (each
// merge x merge square consecutive, as Qwen2VLPreprocess lays them out); windows gather whole
// merge units, so the tower reorders its hidden states by window before the blocks and back
// after the merger.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/image/qwen2vl_preprocess.h"

namespace hap {

struct VisionPatchPositions {
  // Per patch, in the preprocessor's order: its row and column in the patch grid (the 2-D
  // rotary positions; a video's frames repeat them).
  std::vector<int32_t> row, col;
};

VisionPatchPositions QwenVisionPatchPositions(const std::vector<ImageGrid>& grids,
                                              int spatial_merge_size);

struct VisionWindowLayout {
  // window_index[j] is the merge unit that goes to place j (units of merge^2 patches, numbered
  // across all images in order); `inverse` undoes it.
  std::vector<int32_t> window_index, inverse;
  // Boundaries of the attention windows in the reordered sequence, in patches, from 0 to the
  // total, without repeats (a window of padding only adds none).
  std::vector<int32_t> window_bounds;
  // Boundaries of full attention, per frame of each image, in patches (the tower's own order).
  std::vector<int32_t> frame_bounds;
};

// `window_size` is in pixels (config.vision_config.window_size); windows hold
// window_size / patch_size / merge merge units per side, the last row and column of windows
// cut short at the image's edge. InvalidArgument when the grid is not whole merge units or the
// window is not whole merge units.
absl::StatusOr<VisionWindowLayout> QwenVisionWindowLayout(const std::vector<ImageGrid>& grids,
                                                          int patch_size, int spatial_merge_size,
                                                          int window_size);

}  // namespace hap
