// Qwen2.5-VL's 3-D rotary positions (M-RoPE; transformers' Qwen2_5_VLModel.get_rope_index, for
// images): text tokens advance all three axes together; the tokens of an image share one
// temporal position and take height and width positions from their place in the merged patch
// grid, offset by the text before them; text after an image continues from the largest
// position so far plus one. Pruning keeps each kept token's position, and decoding continues
// from `next`.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/image/qwen2vl_preprocess.h"

namespace hap {

struct MropePositions {
  // Per prompt token: temporal, height and width positions.
  std::vector<int32_t> t, h, w;
  // The position of the token after the prompt, on all three axes (transformers' cache
  // position plus rope_deltas).
  int32_t next = 0;
};

// `ids`: the prompt with each image already expanded to its run of `image_token_id`s, one run
// per entry of `grids` in order (grid.h * grid.w / merge^2 tokens each). Images only (grid.t
// 1): a video's temporal positions would depend on its frame timing. InvalidArgument when the
// runs and the grids disagree.
absl::StatusOr<MropePositions> QwenMropePositions(const std::vector<int32_t>& ids,
                                                  const std::vector<ImageGrid>& grids,
                                                  int spatial_merge_size, int image_token_id);

}  // namespace hap
