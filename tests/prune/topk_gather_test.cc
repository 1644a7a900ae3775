// Stable top-k (ties → lower index, kept sets as index sets) and row compaction.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/prune/gather_rows.h"
#include "kernels/cpu/prune/topk.h"
#include "tests/prune/reference.h"

namespace hap {
namespace {

std::vector<int> TopK(const std::vector<float>& s, int k) {
  std::vector<int> kept(k, -1);
  EXPECT_TRUE(kernels::StableTopK(s.data(), static_cast<int>(s.size()), k, kept.data()).ok());
  return kept;
}

TEST(StableTopK, TiesKeepLowerIndices) {
  const std::vector<float> s = {1, 3, 3, 2, 3, 3};
  EXPECT_EQ(TopK(s, 1), (std::vector<int>{1}));
  EXPECT_EQ(TopK(s, 2), (std::vector<int>{1, 2}));
  EXPECT_EQ(TopK(s, 3), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(TopK(s, 5), (std::vector<int>{1, 2, 3, 4, 5}));
  const std::vector<float> flat(9, 0.5f);
  EXPECT_EQ(TopK(flat, 4), (std::vector<int>{0, 1, 2, 3}));
}

TEST(StableTopK, ReturnsAscendingIndicesNotScoreOrder) {
  const std::vector<float> s = {0.1f, 0.9f, 0.2f, 0.8f, 0.7f};
  EXPECT_EQ(TopK(s, 3), (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(TopK(s, 0), std::vector<int>{});
  EXPECT_EQ(TopK(s, 5), (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(StableTopK, MatchesSortOnRandomScoresWithManyTies) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + trial % 97;
    std::uniform_int_distribution<int> level(0, 1 + trial % 6);  // few levels → many ties
    std::vector<float> s(n);
    std::vector<double> ref(n);
    for (int i = 0; i < n; ++i) ref[i] = s[i] = 0.25f * level(rng);
    const int k = static_cast<int>(rng() % (n + 1));
    const std::vector<int> kept = TopK(s, k);
    // Exact ties must resolve to the lower index, so no tolerance here.
    EXPECT_EQ(kept, testref::TopKBySort(ref, k)) << "n=" << n << " k=" << k;
    EXPECT_EQ(std::set<int>(kept.begin(), kept.end()).size(), kept.size());
  }
}

TEST(StableTopK, RejectsNaNAndBadK) {
  const std::vector<float> s = {1, NAN, 2};
  int kept[3];
  EXPECT_EQ(kernels::StableTopK(s.data(), 3, 1, kept).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<float> ok = {1, 2, 3};
  EXPECT_FALSE(kernels::StableTopK(ok.data(), 3, 4, kept).ok());
  EXPECT_FALSE(kernels::StableTopK(ok.data(), 3, -1, kept).ok());
  // ±inf are ordered, not errors.
  const std::vector<float> inf = {-INFINITY, INFINITY, 0};
  ASSERT_TRUE(kernels::StableTopK(inf.data(), 3, 1, kept).ok());
  EXPECT_EQ(kept[0], 1);
}

TEST(GatherRows, BatchedGatherOfFloatRows) {
  // src F32 [2 batches, 4 rows, 3 wide]; value = 100·b + 10·r + c
  std::vector<float> src(2 * 4 * 3);
  for (int b = 0; b < 2; ++b)
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 3; ++c) src[(b * 4 + r) * 3 + c] = 100.f * b + 10.f * r + c;
  const int idx[] = {3, 0, 2};  // any order when not in place
  std::vector<float> dst(2 * 3 * 3, -1.f);
  ASSERT_TRUE(kernels::GatherRows(src.data(), 2, 4, 3 * sizeof(float), idx, 3, dst.data()).ok());
  for (int b = 0; b < 2; ++b)
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c)
        EXPECT_EQ(dst[(b * 3 + r) * 3 + c], 100.f * b + 10.f * idx[r] + c);
}

TEST(GatherRows, InPlaceCompactionOfPositionsAndKv) {
  // I32 positions [1, 8]; keep 1, 2, 5, 7 in place.
  std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5, 6, 7};
  const int idx[] = {1, 2, 5, 7};
  ASSERT_TRUE(kernels::GatherRows(pos.data(), 1, 8, sizeof(int32_t), idx, 4, pos.data()).ok());
  EXPECT_EQ(std::vector<int32_t>(pos.begin(), pos.begin() + 4), (std::vector<int32_t>{1, 2, 5, 7}));
  // K cache F32 [2 heads, 5 tokens, 2]: in place over both heads.
  std::vector<float> kv(2 * 5 * 2);
  std::iota(kv.begin(), kv.end(), 0.f);
  const int keep[] = {0, 3, 4};
  ASSERT_TRUE(kernels::GatherRows(kv.data(), 2, 5, 2 * sizeof(float), keep, 3, kv.data()).ok());
  const std::vector<float> want = {0, 1, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19};
  EXPECT_EQ(std::vector<float>(kv.begin(), kv.begin() + 12), want);
  // In place with a non-ascending list would read overwritten rows: rejected.
  const int bad[] = {2, 1};
  EXPECT_FALSE(kernels::GatherRows(kv.data(), 1, 5, 8, bad, 2, kv.data()).ok());
  const int out_of_range[] = {5};
  std::vector<float> dst(2);
  EXPECT_FALSE(kernels::GatherRows(kv.data(), 1, 5, 8, out_of_range, 1, dst.data()).ok());
}

TEST(SequenceKeepRows, PrefixKeptVisualSuffix) {
  // 3 prefix, 6 visual, 2 text; keep visual 1 and 4.
  const int kept[] = {1, 4};
  std::vector<int> rows(3 + 2 + 2);
  ASSERT_TRUE(kernels::SequenceKeepRows(11, 3, 6, kept, 2, rows.data()).ok());
  EXPECT_EQ(rows, (std::vector<int>{0, 1, 2, 4, 7, 9, 10}));
  const int unsorted[] = {4, 1};
  EXPECT_FALSE(kernels::SequenceKeepRows(11, 3, 6, unsorted, 2, rows.data()).ok());
}

TEST(GatherKeptRows, KeptVisualRowsBetweenPrefixAndText) {
  // 3 prefix, 6 visual, 2 text rows of 2 floats; keep visual 1 and 4.
  std::vector<float> src(11 * 2);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  const int kept[] = {1, 4};
  std::vector<float> dst(7 * 2, -1.f);
  ASSERT_TRUE(kernels::GatherKeptRows(src.data(), 11, 8, 3, 6, kept, 2, dst.data()).ok());
  EXPECT_EQ(dst, (std::vector<float>{0, 1, 2, 3, 4, 5, 8, 9, 14, 15, 18, 19, 20, 21}));
  const int marked[] = {-1, -1};  // what a device writes after a NaN score: refused here
  EXPECT_FALSE(kernels::GatherKeptRows(src.data(), 11, 8, 3, 6, marked, 2, dst.data()).ok());
  EXPECT_FALSE(kernels::GatherKeptRows(src.data(), 11, 8, 3, 6, kept, 2, src.data() + 2).ok());
}

}  // namespace
}  // namespace hap
