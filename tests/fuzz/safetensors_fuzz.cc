// Fuzzes the safetensors reader (runtime/io/safetensors.cc): the input is a whole file (8-byte
// header length, JSON header, data section), handed to SafetensorsFile::Open through a memfd.
// On success every listed tensor must lie inside the data section with the byte size its dtype
// and shape give, and tensors must not overlap.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/io/safetensors.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/json_mutator.h"

namespace {

int MemFd() {
  static const int fd = ::memfd_create("hap_fuzz_safetensors", MFD_CLOEXEC);
  return fd;
}

}  // namespace

HAP_FUZZ_SAFETENSORS_MUTATOR()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = MemFd();
  HAP_FUZZ_CHECK(fd >= 0, "memfd_create failed");
  HAP_FUZZ_CHECK(
      ::ftruncate(fd, 0) == 0 && ::pwrite(fd, data, size, 0) == static_cast<ssize_t>(size),
      "memfd write failed");
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto file = hap::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;

  uint64_t header_len;
  std::memcpy(&header_len, data, 8);
  const uint64_t data_size = size - 8 - header_len;
  const auto& f = **file;
  HAP_FUZZ_CHECK(f.file_size() == size, "file_size %llu for %zu bytes",
                 static_cast<unsigned long long>(f.file_size()), size);
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const hap::TensorInfo& t : f.tensors()) {
    HAP_FUZZ_CHECK(t.begin <= t.end && t.end <= data_size, "tensor '%s' [%llu, %llu) outside %llu",
                   t.name.c_str(), static_cast<unsigned long long>(t.begin),
                   static_cast<unsigned long long>(t.end),
                   static_cast<unsigned long long>(data_size));
    HAP_FUZZ_CHECK(static_cast<uint64_t>(t.numel()) * hap::DTypeSize(t.dtype) == t.end - t.begin,
                   "tensor '%s' byte size differs from its shape", t.name.c_str());
    HAP_FUZZ_CHECK(f.Find(t.name) == &t, "Find('%s') misses", t.name.c_str());
    // The bytes are readable (the mapping covers them) and the same as the input's.
    const uint8_t* p = f.Data(t);
    const size_t n = static_cast<size_t>(t.end - t.begin);
    HAP_FUZZ_CHECK(std::memcmp(p, data + 8 + header_len + t.begin, n) == 0, "tensor '%s' bytes",
                   t.name.c_str());
    if (t.begin != t.end) spans.emplace_back(t.begin, t.end);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    HAP_FUZZ_CHECK(spans[i].first >= spans[i - 1].second, "overlapping tensors accepted");
  }
  return 0;
}
