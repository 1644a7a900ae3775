// QwenVisionPatchPositions / QwenVisionWindowLayout: rows, columns and windows of merge units.
#include "runtime/model/qwen_vision_layout.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace hap {

VisionPatchPositions QwenVisionPatchPositions(const std::vector<ImageGrid>& grids,
                                              int spatial_merge_size) {
  const int m = spatial_merge_size;
  VisionPatchPositions out;
  for (const ImageGrid& g : grids) {
    for (int t = 0; t < g.t; ++t) {
      for (int bh = 0; bh < g.h / m; ++bh) {
        for (int bw = 0; bw < g.w / m; ++bw) {
          for (int mh = 0; mh < m; ++mh) {
            for (int mw = 0; mw < m; ++mw) {
              out.row.push_back(bh * m + mh);
              out.col.push_back(bw * m + mw);
            }
          }
        }
      }
    }
  }
  return out;
}

absl::StatusOr<VisionWindowLayout> QwenVisionWindowLayout(const std::vector<ImageGrid>& grids,
                                                          int patch_size, int spatial_merge_size,
                                                          int window_size) {
  const int m = spatial_merge_size;
  if (patch_size <= 0 || m <= 0 || window_size <= 0 || window_size % (patch_size * m) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("window_size ", window_size,
                     " must be a positive multiple of patch_size * merge = ", patch_size * m));
  }
  const int side = window_size / patch_size / m;  // merge units per window side
  const int unit = m * m;                         // patches per merge unit
  VisionWindowLayout out;
  out.window_bounds.push_back(0);
  out.frame_bounds.push_back(0);
  int32_t first_unit = 0;  // the image's first merge unit across all images
  for (size_t i = 0; i < grids.size(); ++i) {
    const ImageGrid& g = grids[i];
    if (g.t <= 0 || g.h <= 0 || g.w <= 0 || g.h % m != 0 || g.w % m != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("image ", i, "'s grid (", g.t, ", ", g.h, ", ", g.w,
                       ") is not positive with height and width multiples of the merge size ", m));
    }
    const int uh = g.h / m, uw = g.w / m;
    const int windows_h = (uh + side - 1) / side, windows_w = (uw + side - 1) / side;
    for (int t = 0; t < g.t; ++t) {
      for (int wy = 0; wy < windows_h; ++wy) {
        for (int wx = 0; wx < windows_w; ++wx) {
          int32_t units = 0;
          for (int y = wy * side; y < std::min(uh, (wy + 1) * side); ++y) {
            for (int x = wx * side; x < std::min(uw, (wx + 1) * side); ++x, ++units) {
              out.window_index.push_back(first_unit + (t * uh + y) * uw + x);
            }
          }
          out.window_bounds.push_back(out.window_bounds.back() + units * unit);
        }
      }
      out.frame_bounds.push_back(out.frame_bounds.back() + uh * uw * unit);
    }
    first_unit += g.t * uh * uw;
  }
  out.inverse.resize(out.window_index.size());
  for (size_t j = 0; j < out.window_index.size(); ++j) {
    out.inverse[out.window_index[j]] = static_cast<int32_t>(j);
  }
  return out;
}

}  // namespace hap
