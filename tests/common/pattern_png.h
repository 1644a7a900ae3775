// A 96×96 PNG of a fixed, non-repeating colour pattern: an image whose visual tokens differ from
// each other, so pruning methods have something to choose between. Tests of the CUDA backend
// share it to compare backends on the same input.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/image/image.h"
#include "runtime/image/png_encode.h"

namespace hap::testing {

inline std::string PatternPng() {
  RgbImage img;
  img.width = img.height = 96;
  img.pixels.resize(96 * 96 * 3);
  for (size_t i = 0; i < img.pixels.size(); ++i) {
    img.pixels[i] = static_cast<uint8_t>((i * 37 + i / 301 * 11) % 253);
  }
  return EncodePng(img).value();
}

}  // namespace hap::testing
