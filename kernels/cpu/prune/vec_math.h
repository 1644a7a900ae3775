// Branch-free exp/log for the pruning kernels' element-wise passes. std::exp/std::log are library
// calls that the compiler cannot vectorise without -ffast-math; these inline versions use only
// arithmetic, comparisons-as-selects and bit casts, so loops over arrays of them vectorise.
#pragma once

#include <bit>
#include <cstdint>

namespace hap::kernels::vec {

// e^x in F32, within about 1e-7 relative of std::exp for x in [−87.3, 88]; 0 below (where
// std::exp is subnormal or 0), and x clamped to 88 above (the callers pass x ≤ 0). Cephes expf:
// x = n·ln2 + r with |r| ≤ ln2/2, e^r by a degree-6 polynomial, 2^n from the exponent bits.
inline float Exp(float x) {
  constexpr float kLo = -87.33654f, kHi = 88.f;
  const bool under = x < kLo;
  x = x < kLo ? kLo : x;
  x = x > kHi ? kHi : x;
  // n = round(x·log2 e): adding 1.5·2^23 leaves n in the low mantissa bits.
  constexpr float kShift = 12582912.f;
  const float shifted = x * 1.44269504088896341f + kShift;
  const float n = shifted - kShift;
  const int32_t ni = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kShift);
  float r = x - n * 0.693359375f;  // ln2 split in two so n·ln2_hi is exact
  r = r - n * -2.12194440e-4f;
  const float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r2 + r + 1.f;
  // Unsigned, so a NaN input (garbage n) cannot make the shift undefined.
  const float two_n = std::bit_cast<float>(static_cast<uint32_t>(ni + 127) << 23);
  return under ? 0.f : er * two_n;
}

// ln(a) in F64 for a float a > 0 (subnormals included), within a few ulp of
// std::log(double(a)). a = 2^e·m with m in [√½, √2); ln m = 2·atanh(f), f = (m − 1)/(m + 1),
// |f| ≤ 0.172, by its odd series up to f^19. The caller masks out a ≤ 0 (the result is finite
// but meaningless there).
inline double LogOfFloat(float a) {
  // Subnormals: scale into the normal range first.
  const bool tiny = a < 1.17549435e-38f;
  const float an = tiny ? a * 16777216.f : a;  // ·2^24
  const int32_t bits = std::bit_cast<int32_t>(an);
  // m in [1, 2): the exponent bits replaced by those of 1.0.
  float mf = std::bit_cast<float>((bits & 0x007fffff) | 0x3f800000);
  int32_t e = ((bits >> 23) & 0xff) - 127 - (tiny ? 24 : 0);
  const bool big = mf > 1.41421356f;
  mf = big ? mf * 0.5f : mf;  // exact
  e = big ? e + 1 : e;
  const double m = mf;
  const double f = (m - 1.0) / (m + 1.0);
  const double s = f * f;
  double p = 1.0 / 19;
  p = p * s + 1.0 / 17;
  p = p * s + 1.0 / 15;
  p = p * s + 1.0 / 13;
  p = p * s + 1.0 / 11;
  p = p * s + 1.0 / 9;
  p = p * s + 1.0 / 7;
  p = p * s + 1.0 / 5;
  p = p * s + 1.0 / 3;
  const double ln_m = 2.0 * f + 2.0 * f * s * p;
  // ln 2 split so that e·ln2_hi is exact.
  const double ed = e;
  return ed * 6.93147180369123816490e-01 + (ln_m + ed * 1.90821492927058770002e-10);
}

}  // namespace hap::kernels::vec
