// CRC-32C (Castagnoli), the checksum on every tensor chunk the services exchange. Uses the
// SSE4.2 crc32 instruction when the CPU has it, a slicing-by-8 table otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hap {

// Extends `crc` (0 to start) over `n` bytes: Crc32c(Crc32c(0, a), b) == Crc32c(0, a + b).
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(uint32_t crc, std::string_view bytes) {
  return Crc32c(crc, bytes.data(), bytes.size());
}

}  // namespace hap
