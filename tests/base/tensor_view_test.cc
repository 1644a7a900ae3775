// TensorView's strides: Narrow along the rows stays contiguous, along the columns it is strided
// with the parent's strides; extent, Describe and CopyToContiguous follow the strides; bounds are
// refused with the range named.
#include "base/tensor.h"

#include <cstdint>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace hap {
namespace {

TEST(TensorViewTest, ContiguousStridesFollowTheShape) {
  std::vector<float> x(2 * 3 * 4);
  const TensorView v{x.data(), DType::kF32, Device::kCpu, {2, 3, 4}};
  EXPECT_TRUE(v.contiguous());
  EXPECT_EQ(v.stride(0), 12);
  EXPECT_EQ(v.stride(1), 4);
  EXPECT_EQ(v.stride(2), 1);
  EXPECT_EQ(v.extent_bytes(), v.bytes());
  EXPECT_EQ(v.Describe(), "F32 [2, 3, 4] on cpu");
}

TEST(TensorViewTest, NarrowRowsIsContiguousNarrowColumnsIsStrided) {
  std::vector<uint16_t> w(6 * 5);
  std::iota(w.begin(), w.end(), 0);
  const TensorView v{w.data(), DType::kBF16, Device::kCpu, {6, 5}};

  auto rows = v.Narrow(0, 2, 3);  // rows 2..4
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_TRUE(rows->contiguous());
  EXPECT_TRUE(rows->strides.empty());
  EXPECT_EQ(rows->data, w.data() + 10);
  EXPECT_EQ(rows->shape, (std::vector<int64_t>{3, 5}));

  auto cols = v.Narrow(1, 1, 3);  // columns 1..3 of every row
  ASSERT_TRUE(cols.ok()) << cols.status();
  EXPECT_FALSE(cols->contiguous());
  EXPECT_EQ(cols->data, w.data() + 1);
  EXPECT_EQ(cols->strides, (std::vector<int64_t>{5, 1}));
  EXPECT_EQ(cols->bytes(), 6 * 3 * 2);
  EXPECT_EQ(cols->extent_bytes(), (5 * 5 + 2 + 1) * 2);  // last element: row 5, column 3
  EXPECT_EQ(cols->Describe(), "BF16 [6, 3] strides [5, 1] on cpu");

  std::vector<uint16_t> packed(6 * 3, 0xFFFF);
  ASSERT_TRUE(CopyToContiguous(*cols, packed.data()).ok());
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(packed[r * 3 + c], w[r * 5 + 1 + c]) << r << "," << c;
  }

  // A narrow of a narrow keeps the parent's strides; one column is still strided by rows.
  auto one = cols->Narrow(1, 2, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->data, w.data() + 3);
  std::vector<uint16_t> column(6);
  ASSERT_TRUE(CopyToContiguous(*one, column.data()).ok());
  for (int r = 0; r < 6; ++r) EXPECT_EQ(column[r], w[r * 5 + 3]);
  // A single row of the column narrow is contiguous again (one index has no step).
  auto cell_row = cols->Narrow(0, 4, 1);
  ASSERT_TRUE(cell_row.ok());
  EXPECT_TRUE(cell_row->contiguous());
}

TEST(TensorViewTest, NarrowOutsideTheViewIsOutOfRange) {
  std::vector<float> x(4 * 4);
  const TensorView v{x.data(), DType::kF32, Device::kCpu, {4, 4}};
  EXPECT_EQ(v.Narrow(2, 0, 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(v.Narrow(-1, 0, 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(v.Narrow(0, 3, 2).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(v.Narrow(1, -1, 2).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(v.Narrow(1, 0, -1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(v.Narrow(1, 4, 0).ok());  // empty, at the end
  const absl::Status s = v.Narrow(0, 3, 2).status();
  EXPECT_NE(s.message().find("[3, 5) of dimension 0"), std::string::npos) << s;
}

TEST(TensorViewTest, CopyToContiguousRefusesDeviceViewsAndBadStrides) {
  std::vector<float> x(4), out(4);
  TensorView v{x.data(), DType::kF32, Device::kCuda, {2, 2}};
  EXPECT_EQ(CopyToContiguous(v, out.data()).code(), absl::StatusCode::kInvalidArgument);
  v.device = Device::kCpu;
  v.strides = {2};
  EXPECT_EQ(CopyToContiguous(v, out.data()).code(), absl::StatusCode::kInvalidArgument);
  v.strides = {-2, 1};
  EXPECT_EQ(CopyToContiguous(v, out.data()).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hap
