// Writes NumPy .npy files (v1.0, little-endian, C order) so tests and tools can compare
// intermediate tensors with the Python reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace hap {

absl::Status WriteNpy(const std::string& path, const float* data, const std::vector<int64_t>& shape);
absl::Status WriteNpy(const std::string& path, const int32_t* data,
                      const std::vector<int64_t>& shape);

}  // namespace hap
