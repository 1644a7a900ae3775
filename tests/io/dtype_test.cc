// Tests of dtype parsing and the F16/BF16 <-> F32 conversions, including rounding corner cases.
#include "base/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace hap {
namespace {

float FromBits(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

TEST(DTypeTest, ParsesSafetensorsNames) {
  EXPECT_EQ(*ParseDType("F32"), DType::kF32);
  EXPECT_EQ(*ParseDType("F16"), DType::kF16);
  EXPECT_EQ(*ParseDType("BF16"), DType::kBF16);
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_EQ(*ParseDType(DTypeName(d)), d);
  }
}

TEST(DTypeTest, RejectsOtherDtypesNamingThem) {
  for (const char* name : {"I64", "f32", "F64", "", "BF16 "}) {
    auto d = ParseDType(name);
    ASSERT_FALSE(d.ok()) << name;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find(std::string("unsupported dtype '") + name + "'"),
              std::string::npos)
        << d.status();
  }
}

TEST(F16Test, KnownValues) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3C00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xC000);
  EXPECT_EQ(F32ToF16(0.5f), 0x3800);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7BFF);  // largest finite
  EXPECT_EQ(F32ToF16(0.0f), 0x0000);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(F32ToF16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(F16ToF32(0x3C00), 1.0f);
  EXPECT_EQ(F16ToF32(0x7BFF), 65504.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(F16ToF32(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(F16ToF32(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(Bits(F16ToF32(0x8000)), 0x80000000u);         // -0 keeps its sign
  EXPECT_TRUE(std::isinf(F16ToF32(0xFC00)) && F16ToF32(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(F16ToF32(0x7E00)));
  EXPECT_TRUE(std::isnan(F16ToF32(0x7C01)));  // signalling-style payload is still NaN
}

TEST(F16Test, RoundsToNearestEven) {
  // Ties between 1.0 (mantissa 0, even) and 1 + 2^-10: stays at 1.0.
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  // Tie between 1 + 2^-10 (odd) and 1 + 2^-9 (even): goes up.
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  // Just above a tie rounds up.
  EXPECT_EQ(F32ToF16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3C01);
  // Overflow: 65519.996 rounds down to 65504; 65520 is a tie whose even neighbour is Inf.
  EXPECT_EQ(F32ToF16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7C00);
  EXPECT_EQ(F32ToF16(-1e10f), 0xFC00);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::max()), 0x7C00);
}

TEST(F16Test, SubnormalsAndUnderflow) {
  const float tiny = std::ldexp(1.0f, -24);
  EXPECT_EQ(F32ToF16(tiny), 0x0001);
  EXPECT_EQ(F32ToF16(tiny / 2), 0x0000);  // exact tie with 0 -> even (0)
  EXPECT_EQ(F32ToF16(-tiny / 2), 0x8000);
  EXPECT_EQ(F32ToF16(std::nextafter(tiny / 2, 1.0f)), 0x0001);
  EXPECT_EQ(F32ToF16(1.5f * tiny), 0x0002);  // tie 1.5 -> 2 (even)
  EXPECT_EQ(F32ToF16(2.5f * tiny), 0x0002);  // tie 2.5 -> 2 (even)
  EXPECT_EQ(F32ToF16(1e-10f), 0x0000);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::denorm_min()), 0x0000);
  // 1023.5 * 2^-24 ties between the largest subnormal (odd) and the smallest normal (even).
  EXPECT_EQ(F32ToF16(1023.5f * tiny), 0x0400);
  EXPECT_EQ(F32ToF16(1023.25f * tiny), 0x03FF);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);
}

TEST(F16Test, NaNStaysNaN) {
  for (uint32_t bits : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7F802000u}) {
    const uint16_t h = F32ToF16(FromBits(bits));
    EXPECT_EQ(h & 0x7C00, 0x7C00) << std::hex << bits;
    EXPECT_NE(h & 0x03FF, 0) << std::hex << bits;  // not turned into Inf
    EXPECT_EQ(h & 0x8000, (bits >> 16) & 0x8000);
  }
}

TEST(F16Test, EveryBitPatternRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(f))));
      continue;
    }
    ASSERT_EQ(F32ToF16(f), h) << std::hex << h;
  }
}

// Independent check of F32 -> F16 on random values: the result must be a nearest F16, and the
// even one on a tie. Distances are exact in double.
TEST(F16Test, RandomValuesRoundToNearestEven) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> exp_dist(-27, 16);
  std::uniform_real_distribution<float> mant_dist(1.0f, 2.0f);
  for (int i = 0; i < 200000; ++i) {
    float x = std::ldexp(mant_dist(gen), exp_dist(gen));
    if (i % 2) x = -x;
    const uint16_t h = F32ToF16(x);
    const double got = F16ToF32(h);
    if (std::isinf(got)) {
      ASSERT_GE(std::fabs(x), 65520.0f);
      continue;
    }
    const double err = std::fabs(got - x);
    for (int delta : {-1, 1}) {
      const uint16_t mag = h & 0x7FFF;
      if ((mag == 0 && delta < 0) || mag + delta >= 0x7C00) continue;
      const uint16_t other = static_cast<uint16_t>((h & 0x8000) | (mag + delta));
      const double other_err = std::fabs(static_cast<double>(F16ToF32(other)) - x);
      ASSERT_LE(err, other_err) << x;
      if (err == other_err) {
        ASSERT_EQ(h & 1, 0) << "tie not to even at " << x;
      }
    }
  }
}

TEST(BF16Test, KnownValuesAndRounding) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3F80);
  EXPECT_EQ(F32ToBF16(-2.0f), 0xC000);
  EXPECT_EQ(BF16ToF32(0x3F80), 1.0f);
  EXPECT_EQ(BF16ToF32(0x4049), FromBits(0x40490000u));
  EXPECT_EQ(F32ToBF16(FromBits(0x3F808000u)), 0x3F80);              // tie, kept lsb even: down
  EXPECT_EQ(F32ToBF16(FromBits(0x3F818000u)), 0x3F82);              // tie, kept lsb odd: up
  EXPECT_EQ(F32ToBF16(FromBits(0x3F808001u)), 0x3F81);              // above tie: up
  EXPECT_EQ(F32ToBF16(FromBits(0x3F807FFFu)), 0x3F80);              // below tie: down
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to Inf
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(F32ToBF16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(F32ToBF16(-0.0f), 0x8000);
  // Subnormals: BF16 has the F32 exponent range, so they round like any other value.
  EXPECT_EQ(F32ToBF16(FromBits(0x00000001u)), 0x0000);
  EXPECT_EQ(F32ToBF16(FromBits(0x00018000u)), 0x0002);
  EXPECT_EQ(F32ToBF16(FromBits(0x00010000u)), 0x0001);
  EXPECT_EQ(BF16ToF32(0x0001), FromBits(0x00010000u));
}

TEST(BF16Test, NaNStaysNaN) {
  // Plain rounding would carry 0x7F800001 into 0x7F80 (Inf) or truncate the payload away.
  for (uint32_t bits : {0x7F800001u, 0x7FFFFFFFu, 0xFF800001u, 0x7FC00000u}) {
    const float back = BF16ToF32(F32ToBF16(FromBits(bits)));
    EXPECT_TRUE(std::isnan(back)) << std::hex << bits;
    EXPECT_EQ(std::signbit(back), (bits >> 31) != 0);
  }
}

TEST(BF16Test, EveryBitPatternRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = BF16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToBF16(f), h) << std::hex << h;
  }
}

TEST(BulkConvertTest, MatchesScalarAtUnalignedAddresses) {
  std::vector<float> src = {0.0f, -0.0f, 1.0f, -3.25f, 1e-6f, 65504.0f, 1e30f, 0.1f, 7.5e-8f};
  for (DType d : {DType::kF16, DType::kBF16, DType::kF32}) {
    const size_t bytes = src.size() * DTypeSize(d);
    std::vector<uint8_t> storage(bytes + 1);
    uint8_t* packed = storage.data() + 1;  // deliberately misaligned
    ConvertFromF32(d, src.data(), packed, src.size());
    std::vector<float> back(src.size());
    ConvertToF32(d, packed, back.data(), src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      float expected = src[i];
      uint16_t raw;
      std::memcpy(&raw, packed + i * 2, 2);
      if (d == DType::kF16) {
        EXPECT_EQ(raw, F32ToF16(src[i]));
        expected = F16ToF32(F32ToF16(src[i]));
      } else if (d == DType::kBF16) {
        EXPECT_EQ(raw, F32ToBF16(src[i]));
        expected = BF16ToF32(F32ToBF16(src[i]));
      }
      EXPECT_EQ(Bits(back[i]), Bits(expected)) << DTypeName(d) << " " << src[i];
    }
  }
}

// The bulk BF16 path (blocks, no branches) against the scalar rounding on about a million bit
// patterns spread over every exponent, sign and NaN payload, in a length that ends mid-block.
TEST(BulkConvertTest, Bf16BlocksMatchScalarOnEveryKindOfBitPattern) {
  std::vector<float> src;
  for (uint64_t x = 0; x < (uint64_t{1} << 32); x += 4099) {
    src.push_back(std::bit_cast<float>(static_cast<uint32_t>(x)));
  }
  for (uint32_t x : {0x7F800000u, 0xFF800000u, 0x7F7FFFFFu, 0x7F7F8000u, 0x3F808000u, 0x3F818000u,
                     0x00008000u, 0x80000001u, 0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu}) {
    src.push_back(std::bit_cast<float>(x));
  }
  ASSERT_NE(src.size() % 256, 0u);
  std::vector<uint8_t> storage(src.size() * 2 + 1);
  ConvertFromF32(DType::kBF16, src.data(), storage.data() + 1, src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    uint16_t raw;
    std::memcpy(&raw, storage.data() + 1 + 2 * i, 2);
    ASSERT_EQ(raw, F32ToBF16(src[i])) << std::hex << std::bit_cast<uint32_t>(src[i]);
  }
}

}  // namespace
}  // namespace hap
