// The 96×96 pattern image (runtime/image/png_encode.h PatternPng) the tests of the CUDA backend
// share to compare backends on the same input.
#pragma once

#include <string>

#include "runtime/image/png_encode.h"

namespace hap::testing {

inline std::string PatternPng() { return ::hap::PatternPng(96).value(); }

}  // namespace hap::testing
