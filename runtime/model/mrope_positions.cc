// QwenMropePositions: text runs and image grids laid out on the three position axes.
#include "runtime/model/mrope_positions.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace hap {

absl::StatusOr<MropePositions> QwenMropePositions(const std::vector<int32_t>& ids,
                                                  const std::vector<ImageGrid>& grids,
                                                  int spatial_merge_size, int image_token_id) {
  if (spatial_merge_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spatial_merge_size must be positive, got ", spatial_merge_size));
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  MropePositions out;
  out.t.reserve(n);
  out.h.reserve(n);
  out.w.reserve(n);
  int32_t next = 0;  // the position the next text token takes
  auto text = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i, ++next) {
      out.t.push_back(next);
      out.h.push_back(next);
      out.w.push_back(next);
    }
  };
  int64_t at = 0;
  for (size_t g = 0; g < grids.size(); ++g) {
    const ImageGrid& grid = grids[g];
    if (grid.t != 1 || grid.h <= 0 || grid.w <= 0 || grid.h % spatial_merge_size != 0 ||
        grid.w % spatial_merge_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "image ", g, "'s grid (", grid.t, ", ", grid.h, ", ", grid.w,
          ") is not one frame with height and width positive multiples of spatial_merge_size ",
          spatial_merge_size));
    }
    const int64_t start = std::find(ids.begin() + at, ids.end(), image_token_id) - ids.begin();
    if (start == n) {
      return absl::InvalidArgumentError(absl::StrCat("the prompt holds ", g, " image runs but ",
                                                     grids.size(), " image grids were given"));
    }
    text(at, start);
    const int gh = grid.h / spatial_merge_size, gw = grid.w / spatial_merge_size;
    const int64_t tokens = static_cast<int64_t>(grid.t) * gh * gw;
    // As transformers does, the image takes the grid's count of tokens from its first one
    // (two images may follow each other with no text between).
    int64_t run = start;
    while (run < n && run - start < tokens && ids[run] == image_token_id) ++run;
    if (run - start != tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("image ", g, " has ", run - start, " image tokens in the prompt, but its ",
                       grid.t, "x", grid.h, "x", grid.w, " grid merges to ", tokens));
    }
    // A still image sits at temporal offset 0 (transformers multiplies the frame index by
    // second_per_grid_t, which is 0 for images).
    for (int y = 0; y < gh; ++y) {
      for (int x = 0; x < gw; ++x) {
        out.t.push_back(next);
        out.h.push_back(next + y);
        out.w.push_back(next + x);
      }
    }
    next += std::max(gh, gw);
    at = run;
  }
  if (std::find(ids.begin() + at, ids.end(), image_token_id) != ids.end()) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt holds more image runs than the ",
                                                   grids.size(), " image grids given"));
  }
  text(at, n);
  out.next = next;
  return out;
}

}  // namespace hap
