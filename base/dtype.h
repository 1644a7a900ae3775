// Element types of checkpoint tensors (F32, F16, BF16) and their conversions to and from F32.
// Conversions to the narrow types round to nearest, ties to even, like numpy and torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace hap {

enum class DType { kF32, kF16, kBF16 };

// "F32" / "F16" / "BF16" as spelled in safetensors headers; anything else is InvalidArgument
// naming the dtype as unsupported.
absl::StatusOr<DType> ParseDType(std::string_view name);
std::string_view DTypeName(DType dtype);
size_t DTypeSize(DType dtype);  // bytes per element

// Scalar conversions on the raw bit patterns. NaN stays NaN (quiet), +-Inf and signed zeros are
// preserved, subnormals are produced and read exactly; F32 values too large for F16 become Inf.
float F16ToF32(uint16_t bits);
uint16_t F32ToF16(float value);
float BF16ToF32(uint16_t bits);
uint16_t F32ToBF16(float value);

// Bulk conversions of n elements. `src`/`dst` of the narrow type may be unaligned (tensors in
// a memory-mapped safetensors file start wherever the header ends) and are little-endian.
void ConvertToF32(DType src_dtype, const void* src, float* dst, size_t n);
void ConvertFromF32(DType dst_dtype, const float* src, void* dst, size_t n);

}  // namespace hap
