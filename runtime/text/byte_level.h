// GPT-2's reversible map of the 256 bytes onto printable characters, which byte-level BPE
// vocabularies (GPT-2, Qwen2, Llama 3) are written in: the printable Latin-1 bytes stand for
// themselves, the others take U+0100 onwards in byte order.
#pragma once

#include <cstdint>

namespace hap {

// The character that stands for `byte`.
char32_t ByteLevelChar(uint8_t byte);
// The byte `c` stands for; -1 when it stands for none.
int ByteLevelByte(char32_t c);

}  // namespace hap
