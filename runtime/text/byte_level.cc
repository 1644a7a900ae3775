// ByteLevelChar / ByteLevelByte: one table each way, built once.
#include "runtime/text/byte_level.h"

#include <array>

namespace hap {
namespace {

struct ByteLevelMap {
  std::array<char32_t, 256> to_char;
  std::array<int16_t, 512> to_byte;  // indexed by character, -1 where it stands for no byte

  ByteLevelMap() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelMap& Map() {
  static const ByteLevelMap map;
  return map;
}

}  // namespace

char32_t ByteLevelChar(uint8_t byte) { return Map().to_char[byte]; }

int ByteLevelByte(char32_t c) { return c < Map().to_byte.size() ? Map().to_byte[c] : -1; }

}  // namespace hap
