// Qwen2.5-VL M-RoPE positions: hand-worked layouts of transformers' get_rope_index for images.
#include "runtime/model/mrope_positions.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hap {
namespace {

constexpr int kImage = 99;

TEST(MropePositions, TextOnlyAdvancesAllAxesTogether) {
  auto p = QwenMropePositions({5, 6, 7}, {}, 2, kImage);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->t, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(p->h, p->t);
  EXPECT_EQ(p->w, p->t);
  EXPECT_EQ(p->next, 3);
}

TEST(MropePositions, ImageTakesItsGridPlaceAndTextContinuesPastIt) {
  // "a b <vision_start>" + a 4x6 patch grid merged 2x2 (2 rows of 3) + "<vision_end> c d".
  const std::vector<int32_t> ids = {1,      2,      50,     kImage, kImage, kImage,
                                    kImage, kImage, kImage, 51,     3,      4};
  auto p = QwenMropePositions(ids, {{1, 4, 6}}, 2, kImage);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->t, (std::vector<int32_t>{0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7, 8}));
  EXPECT_EQ(p->h, (std::vector<int32_t>{0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7, 8}));
  EXPECT_EQ(p->w, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(p->next, 9);  // transformers' rope_deltas = 9 - 12
}

TEST(MropePositions, TwoImagesBackToBackTallGrid) {
  // A 3-row x 1-column merged image, then a 1x2 one with no text between them.
  const std::vector<int32_t> ids = {7, kImage, kImage, kImage, kImage, kImage, 8};
  auto p = QwenMropePositions(ids, {{1, 6, 2}, {1, 2, 4}}, 2, kImage);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->t, (std::vector<int32_t>{0, 1, 1, 1, 4, 4, 6}));
  EXPECT_EQ(p->h, (std::vector<int32_t>{0, 1, 2, 3, 4, 4, 6}));
  EXPECT_EQ(p->w, (std::vector<int32_t>{0, 1, 1, 1, 4, 5, 6}));
  EXPECT_EQ(p->next, 7);
}

TEST(MropePositions, RunsMustMatchTheGrids) {
  const std::vector<int32_t> ids = {1, kImage, kImage, kImage, 2};
  for (const auto& [grids, fragment] : std::vector<std::pair<std::vector<ImageGrid>, std::string>>{
           {{{1, 4, 4}}, "has 3 image tokens in the prompt"},
           {{}, "more image runs than the 0 image grids"},
           {{{1, 2, 6}, {1, 2, 2}}, "holds 1 image runs but 2 image grids"},
           {{{2, 2, 6}}, "not one frame"},
           {{{1, 3, 6}}, "multiples of spatial_merge_size 2"}}) {
    auto p = QwenMropePositions(ids, grids, 2, kImage);
    ASSERT_FALSE(p.ok()) << fragment;
    EXPECT_NE(p.status().message().find(fragment), std::string::npos) << p.status();
  }
}

}  // namespace
}  // namespace hap
