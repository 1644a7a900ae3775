// Tests of safetensors reading and writing: round trips per dtype and rejection of bad files.
#include "runtime/io/safetensors.h"

#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/io/test_util.h"

namespace hap {
namespace {

using ::hap::testing::FloatBytes;
using ::hap::testing::RawSafetensors;
using ::hap::testing::ReadFile;
using ::hap::testing::ScratchDir;
using ::hap::testing::WriteFile;

float Expected(DType d, float v) {
  if (d == DType::kF16) return F16ToF32(F32ToF16(v));
  if (d == DType::kBF16) return BF16ToF32(F32ToBF16(v));
  return v;
}

class SafetensorsRoundTripTest : public ::testing::TestWithParam<DType> {};

TEST_P(SafetensorsRoundTripTest, WritesAndReadsBack) {
  const DType dtype = GetParam();
  ScratchDir dir;
  const std::string path = dir / "t.safetensors";
  std::vector<float> a(3 * 5), b(7), scalar = {2.5f};
  std::iota(a.begin(), a.end(), -4.0f);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * static_cast<float>(i * i) - 1.0f;
  // Written out of name order on purpose: the data section must keep the given order.
  const std::vector<TensorToWrite> tensors = {
      {"z.first", {3, 5}, a.data()},
      {"a.second", {7}, b.data()},
      {"m.scalar", {}, scalar.data()},
      {"empty", {0, 4}, nullptr},
  };
  ASSERT_TRUE(WriteSafetensors(path, tensors, dtype, {{"format", "pt"}, {"k", "v"}}).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  // Header length keeps the data section 8-byte aligned.
  const std::string bytes = ReadFile(path);
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_len + (15 + 7 + 1) * DTypeSize(dtype));

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsFile& f = **file;
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"k", "v"}}));
  ASSERT_EQ(f.tensors().size(), 4u);
  // tensors() is in data order; the empty tensor sits at the end with zero bytes.
  EXPECT_EQ(f.tensors()[0].name, "z.first");
  EXPECT_EQ(f.tensors()[1].name, "a.second");
  EXPECT_EQ(f.tensors()[2].name, "m.scalar");
  const size_t es = DTypeSize(dtype);
  EXPECT_EQ(f.tensors()[0].begin, 0u);
  EXPECT_EQ(f.tensors()[0].end, 15 * es);
  EXPECT_EQ(f.tensors()[1].begin, 15 * es);

  const TensorInfo* ta = f.Find("z.first");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, dtype);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(ta->numel(), 15);
  std::vector<float> got(15);
  ConvertToF32(dtype, f.Data(*ta), got.data(), got.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(got[i], Expected(dtype, a[i])) << i;

  const TensorInfo* tb = f.Find("a.second");
  ASSERT_NE(tb, nullptr);
  got.resize(7);
  ConvertToF32(dtype, f.Data(*tb), got.data(), got.size());
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(got[i], Expected(dtype, b[i])) << i;

  const TensorInfo* ts = f.Find("m.scalar");
  ASSERT_NE(ts, nullptr);
  EXPECT_TRUE(ts->shape.empty());
  EXPECT_EQ(ts->numel(), 1);
  float s;
  ConvertToF32(dtype, f.Data(*ts), &s, 1);
  EXPECT_EQ(s, 2.5f);

  const TensorInfo* te = f.Find("empty");
  ASSERT_NE(te, nullptr);
  EXPECT_EQ(te->numel(), 0);
  EXPECT_EQ(te->begin, te->end);
  EXPECT_EQ(f.Find("missing"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, SafetensorsRoundTripTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(SafetensorsWriteTest, RejectsBadTensorsWithoutWriting) {
  ScratchDir dir;
  const std::string path = dir / "bad.safetensors";
  float v[4] = {1, 2, 3, 4};
  auto dup = WriteSafetensors(path, {{"x", {2}, v}, {"x", {2}, v}}, DType::kF32);
  EXPECT_EQ(dup.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dup.message().find("'x': name given twice"), std::string::npos) << dup;
  auto neg = WriteSafetensors(path, {{"x", {2, -2}, v}}, DType::kF32);
  EXPECT_EQ(neg.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(neg.message().find("negative dimension"), std::string::npos) << neg;
  auto null = WriteSafetensors(path, {{"x", {2}, nullptr}}, DType::kF16);
  EXPECT_EQ(null.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(null.message().find("no data"), std::string::npos) << null;
  auto reserved = WriteSafetensors(path, {{"__metadata__", {1}, v}}, DType::kF16);
  EXPECT_EQ(reserved.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
  auto no_dir = WriteSafetensors(dir / "nope/x.safetensors", {{"x", {1}, v}}, DType::kF32);
  EXPECT_EQ(no_dir.code(), absl::StatusCode::kNotFound) << no_dir;
}

// ---- bad files --------------------------------------------------------------------------------

class SafetensorsBadFileTest : public ::testing::Test {
 protected:
  // Writes `bytes` as the file and opens it, expecting failure with `code`; the message must
  // name the file and contain `fragment`.
  void ExpectError(const std::string& bytes, absl::StatusCode code, const std::string& fragment) {
    const std::string path = dir_ / "model.safetensors";
    WriteFile(path, bytes);
    auto file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok()) << "opened a bad file; expected: " << fragment;
    EXPECT_EQ(file.status().code(), code) << file.status();
    const std::string msg(file.status().message());
    EXPECT_NE(msg.find(path + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line message: " << msg;
  }

  ScratchDir dir_;
};

TEST_F(SafetensorsBadFileTest, FileShorterThanHeaderLength) {
  ExpectError("abcde", absl::StatusCode::kInvalidArgument, "file is 5 bytes, too short");
  ExpectError("", absl::StatusCode::kInvalidArgument, "file is 0 bytes");
}

TEST_F(SafetensorsBadFileTest, TruncatedDataSection) {
  // A valid file cut short: the last tensor's offsets now reach past the data section.
  const std::string path = dir_ / "whole.safetensors";
  float v[6] = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(WriteSafetensors(path, {{"a", {2}, v}, {"b", {4}, v + 2}}, DType::kF32).ok());
  std::string bytes = ReadFile(path);
  bytes.resize(bytes.size() - 3);
  ExpectError(bytes, absl::StatusCode::kInvalidArgument,
              "tensor 'b': data_offsets [8, 24] run past the end of the data section (21 bytes)");
}

TEST_F(SafetensorsBadFileTest, HeaderLengthPastEndOfFile) {
  std::string bytes = RawSafetensors("{}", "");
  const uint64_t huge = 1000;
  std::memcpy(bytes.data(), &huge, 8);
  ExpectError(bytes, absl::StatusCode::kInvalidArgument,
              "header length 1000 runs past the end of the file (10 bytes");
  const uint64_t absurd = ~uint64_t{0};
  std::memcpy(bytes.data(), &absurd, 8);
  ExpectError(bytes, absl::StatusCode::kInvalidArgument, "runs past the end of the file");
}

TEST_F(SafetensorsBadFileTest, HeaderNotJson) {
  ExpectError(RawSafetensors("{\"a\": [1, 2", ""), absl::StatusCode::kInvalidArgument,
              "header is not valid JSON");
  ExpectError(RawSafetensors("PK\x03\x04 not json", ""), absl::StatusCode::kInvalidArgument,
              "header is not valid JSON");
}

TEST_F(SafetensorsBadFileTest, HeaderNotAnObject) {
  ExpectError(RawSafetensors("[1, 2]", ""), absl::StatusCode::kInvalidArgument,
              "header is a JSON array, expected an object");
}

TEST_F(SafetensorsBadFileTest, OverlappingOffsets) {
  ExpectError(RawSafetensors(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                             FloatBytes({1, 2, 3, 4})),
              absl::StatusCode::kInvalidArgument,
              "tensor 'a' (data_offsets [0, 12]) overlaps tensor 'b' (data_offsets [8, 16])");
}

TEST_F(SafetensorsBadFileTest, OffsetsPastEndOfData) {
  ExpectError(RawSafetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                             FloatBytes({1, 2})),
              absl::StatusCode::kInvalidArgument,
              "tensor 'w': data_offsets [4, 12] run past the end of the data section (8 bytes)");
}

TEST_F(SafetensorsBadFileTest, ByteSizeDisagreesWithDtypeAndShape) {
  ExpectError(
      RawSafetensors(R"({"x.weight":{"dtype":"F32","shape":[3],"data_offsets":[0,10]}})",
                     std::string(12, '\0')),
      absl::StatusCode::kInvalidArgument,
      "model.safetensors: tensor 'x.weight': data_offsets [0, 10] hold 10 bytes, expected 12 "
      "(F32 [3])");
  ExpectError(RawSafetensors(R"({"h":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]}})",
                             std::string(24, '\0')),
              absl::StatusCode::kInvalidArgument, "hold 24 bytes, expected 12 (BF16 [2, 3])");
}

TEST_F(SafetensorsBadFileTest, ShapeWhoseByteSizeOverflows) {
  ExpectError(RawSafetensors(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],)"
                             R"("data_offsets":[0,0]}})",
                             ""),
              absl::StatusCode::kInvalidArgument, "byte size overflows");
}

TEST_F(SafetensorsBadFileTest, UnsupportedDtype) {
  ExpectError(RawSafetensors(R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                             std::string(8, '\0')),
              absl::StatusCode::kInvalidArgument, "tensor 'ids': unsupported dtype 'I64'");
}

TEST_F(SafetensorsBadFileTest, NegativeDimension) {
  ExpectError(RawSafetensors(R"({"x":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,0]}})", ""),
              absl::StatusCode::kInvalidArgument, "tensor 'x': shape [2, -1] has a negative");
}

TEST_F(SafetensorsBadFileTest, EntryFieldsOfWrongTypeOrMissing) {
  ExpectError(RawSafetensors(R"({"x":{"dtype":"F32","shape":[1]}})", ""),
              absl::StatusCode::kInvalidArgument, "tensor 'x': missing 'data_offsets'");
  ExpectError(RawSafetensors(R"({"x":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", ""),
              absl::StatusCode::kInvalidArgument, "'shape' is a JSON string, expected an array");
  ExpectError(RawSafetensors(R"({"x":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", ""),
              absl::StatusCode::kInvalidArgument, "'shape' must hold integers");
  ExpectError(RawSafetensors(R"({"x":{"dtype":32,"shape":[1],"data_offsets":[0,4]}})", ""),
              absl::StatusCode::kInvalidArgument, "'dtype' is a JSON number, expected a string");
  ExpectError(RawSafetensors(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", ""),
              absl::StatusCode::kInvalidArgument, "'data_offsets' must be [begin, end]");
  ExpectError(RawSafetensors(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", ""),
              absl::StatusCode::kInvalidArgument, "'data_offsets' must be [begin, end]");
  ExpectError(RawSafetensors(R"({"x":[0,4]})", ""), absl::StatusCode::kInvalidArgument,
              "tensor 'x': entry is a JSON array");
}

TEST_F(SafetensorsBadFileTest, MetadataMustMapStringsToStrings) {
  ExpectError(RawSafetensors(R"({"__metadata__":{"format":"pt","n":3}})", ""),
              absl::StatusCode::kInvalidArgument, "__metadata__ key 'n' is a JSON number");
  ExpectError(RawSafetensors(R"({"__metadata__":["pt"]})", ""), absl::StatusCode::kInvalidArgument,
              "__metadata__ is a JSON array");
}

TEST(SafetensorsOpenTest, MissingFileIsNotFound) {
  ScratchDir dir;
  auto file = SafetensorsFile::Open(dir / "absent.safetensors");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(file.status().message().find("absent.safetensors: cannot open"), std::string::npos);
}

TEST(SafetensorsOpenTest, AcceptsUnpaddedHeaderAndEmptyTensors) {
  // Writers other than ours may leave the data section unaligned and hold empty tensors
  // anywhere (they occupy no bytes, so cannot overlap).
  ScratchDir dir;
  const std::string path = dir / "odd.safetensors";
  WriteFile(path, RawSafetensors(R"({"e":{"dtype":"F16","shape":[0],"data_offsets":[2,2]},)"
                                 R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                 FloatBytes({1.5f, -2.0f})));
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const TensorInfo* w = (*file)->Find("w");
  ASSERT_NE(w, nullptr);
  float v[2];
  std::memcpy(v, (*file)->Data(*w), 8);
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_TRUE((*file)->metadata().empty());
}

}  // namespace
}  // namespace hap
