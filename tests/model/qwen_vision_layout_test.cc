// Qwen2.5-VL vision tower bookkeeping: rotary rows/columns and attention windows, worked by hand
// from transformers' rot_pos_emb and get_window_index.
#include "runtime/model/qwen_vision_layout.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hap {
namespace {

TEST(QwenVisionLayout, PatchPositionsFollowMergeUnits) {
  const VisionPatchPositions p = QwenVisionPatchPositions({{1, 4, 4}}, 2);
  EXPECT_EQ(p.row, (std::vector<int32_t>{0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3}));
  EXPECT_EQ(p.col, (std::vector<int32_t>{0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3}));
}

TEST(QwenVisionLayout, WindowsCutShortAtTheEdge) {
  // 6x10 patches = 3x5 merge units; 56 px windows are 2x2 units.
  auto l = QwenVisionWindowLayout({{1, 6, 10}}, 14, 2, 56);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->window_index,
            (std::vector<int32_t>{0, 1, 5, 6, 2, 3, 7, 8, 4, 9, 10, 11, 12, 13, 14}));
  EXPECT_EQ(l->window_bounds, (std::vector<int32_t>{0, 16, 32, 40, 48, 56, 60}));
  EXPECT_EQ(l->frame_bounds, (std::vector<int32_t>{0, 60}));
  for (size_t j = 0; j < l->window_index.size(); ++j) {
    EXPECT_EQ(l->inverse[l->window_index[j]], static_cast<int32_t>(j));
  }
}

TEST(QwenVisionLayout, ImagesNumberTheirUnitsInOrder) {
  // A 2x2-unit image in exactly one window, then a 1x3-unit one in two.
  auto l = QwenVisionWindowLayout({{1, 4, 4}, {1, 2, 6}}, 14, 2, 56);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->window_index, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(l->window_bounds, (std::vector<int32_t>{0, 16, 24, 28}));
  EXPECT_EQ(l->frame_bounds, (std::vector<int32_t>{0, 16, 28}));
}

TEST(QwenVisionLayout, Qwen25VLSizes) {
  // 1344 px square at patch 14: 96x96 patches, 48x48 units, 112 px windows of 4x4 units.
  auto l = QwenVisionWindowLayout({{1, 96, 96}}, 14, 2, 112);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->window_index.size(), 48u * 48u);
  EXPECT_EQ(l->window_bounds.size(), 12u * 12u + 1);
  EXPECT_EQ(l->window_bounds.back(), 96 * 96);
  std::vector<int> seen(48 * 48, 0);
  for (int32_t u : l->window_index) ++seen[u];
  for (int s : seen) ASSERT_EQ(s, 1);
}

TEST(QwenVisionLayout, RefusesPartialUnits) {
  auto l = QwenVisionWindowLayout({{1, 5, 4}}, 14, 2, 56);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("multiples of the merge size 2"), std::string::npos);
  l = QwenVisionWindowLayout({{1, 4, 4}}, 14, 2, 100);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("window_size 100"), std::string::npos);
}

}  // namespace
}  // namespace hap
