#include "base/npy.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace hap {
namespace {

absl::Status Write(const std::string& path, const char* descr, const void* data, size_t elem,
                   const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  std::string shape_str = absl::StrJoin(shape, ", ");
  if (shape.size() == 1) shape_str += ",";
  std::string header = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (",
                                    shape_str, "), }");
  // Pad so that magic(6) + version(2) + len(2) + header is a multiple of 64, ending in '\n'.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(path, std::ios::binary);
  if (!f) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  const uint16_t len = static_cast<uint16_t>(header.size());
  f.write("\x93NUMPY\x01\x00", 8);
  f.write(reinterpret_cast<const char*>(&len), 2);
  f.write(header.data(), header.size());
  f.write(static_cast<const char*>(data), count * elem);
  if (!f) return absl::UnavailableError(absl::StrCat("short write to ", path));
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteNpy(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  return Write(path, "<f4", data, sizeof(float), shape);
}

absl::Status WriteNpy(const std::string& path, const int32_t* data,
                      const std::vector<int64_t>& shape) {
  return Write(path, "<i4", data, sizeof(int32_t), shape);
}

}  // namespace hap
