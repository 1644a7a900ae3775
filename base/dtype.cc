// Element types of checkpoint tensors and their conversions to and from F32.
#include "base/dtype.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/string_view_compat.h"

namespace hap {

// safetensors stores little-endian data and the conversions below reinterpret it in place.
static_assert(std::endian::native == std::endian::little, "hap_io assumes a little-endian host");

absl::StatusOr<DType> ParseDType(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype '", AsAbsl(name), "' (supported: F32, F16, BF16)"));
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
  }
  return "?";
}

size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

float F16ToF32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1Fu;
  const uint32_t mant = bits & 0x3FFu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in F32.
    const float magnitude = static_cast<float>(mant) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | sign);
  }
  if (exp == 0x1F) {  // Inf (mant == 0) or NaN (payload kept in the high mantissa bits)
    return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  }
  // Normal: rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t F32ToF16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) {  // NaN: force the quiet bit so a payload in low bits cannot vanish
    return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  }
  // 65520 = 65504 (largest F16) + half an ulp; the tie rounds to the even neighbour, Inf.
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (abs >= 0x38800000u) {                // result is a normal F16 (|value| >= 2^-14)
    const uint32_t v = abs - 0x38000000u;  // exponent rebiased from 127 to 15
    uint32_t q = v >> 13;
    const uint32_t rem = v & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;  // a carry bumps the exponent
    return static_cast<uint16_t>(sign | q);
  }
  // Subnormal F16 or zero: the result is round(|value| / 2^-24). |value| <= 2^-25 gives 0
  // (2^-25 itself is a tie and rounds to the even 0).
  if (abs <= 0x33000000u) return sign;
  const uint32_t e = abs >> 23;  // 102..112 here
  const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - e;  // |value| / 2^-24 = mant * 2^(e - 126)
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // may reach 0x400, the smallest normal
  return static_cast<uint16_t>(sign | q);
}

float BF16ToF32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t F32ToBF16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: truncating could clear the payload -> Inf
    return static_cast<uint16_t>((x >> 16) | 0x0040u);
  }
  // Adding 0x7FFF (+1 when the kept lsb is odd) rounds to nearest-even; overflow reaches Inf.
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

namespace {

// F16 -> F32 for all 65536 bit patterns; a table lookup is several times faster than the
// branchy scalar path when a checkpoint holds billions of F16 weights.
const std::array<float, 65536>& F16Table() {
  static const std::array<float, 65536>* table = [] {
    auto* t = new std::array<float, 65536>;
    for (uint32_t i = 0; i < 65536; ++i) (*t)[i] = F16ToF32(static_cast<uint16_t>(i));
    return t;
  }();
  return *table;
}

}  // namespace

void ConvertToF32(DType src_dtype, const void* src, float* dst, size_t n) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (src_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16: {
      const auto& table = F16Table();
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        dst[i] = table[h];
      }
      return;
    }
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        dst[i] = BF16ToF32(h);
      }
      return;
  }
}

void ConvertFromF32(DType dst_dtype, const float* src, void* dst, size_t n) {
  auto* bytes = static_cast<uint8_t*>(dst);
  switch (dst_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = F32ToF16(src[i]);
        std::memcpy(bytes + 2 * i, &h, 2);
      }
      return;
    case DType::kBF16: {
      // F32ToBF16 without branches, a block at a time into an aligned buffer, so that the
      // compiler vectorizes it (a KV cache rounds every prefill row: ~5x faster).
      constexpr size_t kBlock = 256;
      uint32_t bits[kBlock];
      uint16_t out[kBlock];
      for (size_t at = 0; at < n; at += kBlock) {
        const size_t m = std::min(kBlock, n - at);
        std::memcpy(bits, src + at, m * sizeof(float));
        for (size_t i = 0; i < m; ++i) {
          const uint32_t x = bits[i];
          const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
          const uint32_t quiet_nan = (x >> 16) | 0x0040u;
          out[i] = static_cast<uint16_t>((x & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
        }
        std::memcpy(bytes + 2 * at, out, m * sizeof(uint16_t));
      }
      return;
    }
  }
}

}  // namespace hap
