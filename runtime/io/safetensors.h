// Reading (memory-mapped, validated) and writing of safetensors files: an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw data section.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/dtype.h"

namespace hap {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;

  int64_t numel() const;
};

// A read-only view of one safetensors file. Open() maps the whole file and validates the
// header completely, so Data() of any listed tensor is safe to read for numel() elements.
class SafetensorsFile {
 public:
  // Largest header accepted (the reference implementation's limit), so a corrupt length
  // cannot make the parser chew through a multi-gigabyte data section.
  static constexpr uint64_t kMaxHeaderBytes = 100u << 20;

  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // In data-section order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr when the file has no tensor of that name.
  const TensorInfo* Find(std::string_view name) const;
  // Start of the tensor's bytes inside the mapping; no alignment is guaranteed.
  const uint8_t* Data(const TensorInfo& info) const { return data_ + info.begin; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t file_size() const { return size_; }

 private:
  SafetensorsFile() = default;

  std::string path_;
  void* map_ = nullptr;
  uint64_t size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;  // product(shape) values
};

// Writes `tensors` in the given order, converted to `dtype`. The header is padded with spaces
// to a multiple of 8 bytes so the data section stays 8-byte aligned in the file. The file is
// written beside `path` and renamed into place, so readers never see a partial file.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              DType dtype, const std::map<std::string, std::string>& metadata = {});

// "[3, 4]" — used in error messages across hap_io.
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace hap
