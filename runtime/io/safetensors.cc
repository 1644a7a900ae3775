// Reading (memory-mapped, validated) and writing of safetensors files.
#include "runtime/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "base/status_macros.h"
#include "base/string_view_compat.h"

namespace hap {
namespace {

using Json = nlohmann::json;

absl::Status ErrnoError(int err, const std::string& what) {
  const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::UnavailableError(msg);
  }
}

// Compact JSON for error messages, cut short so a huge bad value cannot flood a log line.
std::string Brief(const Json& j) {
  std::string s = j.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string OffsetsString(uint64_t begin, uint64_t end) {
  return absl::StrCat("[", begin, ", ", end, "]");
}

// Parses one header entry into `info` (name already set); `data_size` bounds the offsets.
absl::Status ParseEntry(const std::string& path, const Json& entry, uint64_t data_size,
                        TensorInfo& info) {
  const std::string where = absl::StrCat(path, ": tensor '", info.name, "'");
  if (!entry.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": entry is a JSON ", entry.type_name(),
                     ", expected an object with dtype, shape and data_offsets"));
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": missing '", key, "'"));
    }
  }
  const Json& dtype = entry["dtype"];
  if (!dtype.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": 'dtype' is a JSON ", dtype.type_name(), ", expected a string"));
  }
  auto parsed = ParseDType(dtype.get<std::string>());
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", parsed.status().message()));
  }
  info.dtype = *parsed;

  const Json& shape = entry["shape"];
  if (!shape.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": 'shape' is a JSON ", shape.type_name(), ", expected an array"));
  }
  for (const Json& dim : shape) {
    if (!dim.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": 'shape' must hold integers, got ", Brief(shape)));
    }
    if (dim.is_number_unsigned() && dim.get<uint64_t>() > uint64_t{INT64_MAX}) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": shape ", Brief(shape), " has a dimension out of range"));
    }
    info.shape.push_back(dim.get<int64_t>());
  }
  for (int64_t d : info.shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": shape ", ShapeString(info.shape), " has a negative dimension"));
    }
  }

  const Json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned() || offsets[0].get<uint64_t>() > offsets[1].get<uint64_t>()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": 'data_offsets' must be [begin, end] with 0 <= begin <= end, got ",
                     Brief(offsets)));
  }
  info.begin = offsets[0].get<uint64_t>();
  info.end = offsets[1].get<uint64_t>();

  // Byte size from the shape, refusing products that overflow 64 bits.
  uint64_t bytes = DTypeSize(info.dtype);
  bool overflow = false;
  for (int64_t d : info.shape) {
    overflow |= __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes);
  }
  const std::string declared =
      absl::StrCat(AsAbsl(DTypeName(info.dtype)), " ", ShapeString(info.shape));
  if (overflow) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", declared, " is too large (byte size overflows 64 bits)"));
  }
  if (info.end - info.begin != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": data_offsets ", OffsetsString(info.begin, info.end), " hold ",
                     info.end - info.begin, " bytes, expected ", bytes, " (", declared, ")"));
  }
  if (info.end > data_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": data_offsets ", OffsetsString(info.begin, info.end),
                     " run past the end of the data section (", data_size, " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status ParseMetadata(const std::string& path, const Json& meta,
                           std::map<std::string, std::string>& out) {
  if (!meta.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": __metadata__ is a JSON ", meta.type_name(), ", expected an object of strings"));
  }
  for (const auto& [key, value] : meta.items()) {
    if (!value.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": __metadata__ key '", key,
                                                     "' is a JSON ", value.type_name(),
                                                     ", expected a string"));
    }
    out[key] = value.get<std::string>();
  }
  return absl::OkStatus();
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile);
  file->path_ = path;

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, absl::StrCat(path, ": cannot open"));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError(err, absl::StrCat(path, ": cannot stat"));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": file is ", size, " bytes, too short for the 8-byte header length (truncated?)"));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (map == MAP_FAILED) return ErrnoError(map_err, absl::StrCat(path, ": cannot mmap"));
  file->map_ = map;
  file->size_ = size;
  const auto* bytes = static_cast<const uint8_t*>(map);

  uint64_t header_len;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > size - 8) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header length ", header_len,
                                                   " runs past the end of the file (", size,
                                                   " bytes; truncated or not safetensors?)"));
  }
  if (header_len > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": header length ", header_len, " exceeds the limit of ", kMaxHeaderBytes, " bytes"));
  }
  const auto* header_begin = reinterpret_cast<const char*>(bytes + 8);
  Json header;
  try {
    header = Json::parse(header_begin, header_begin + header_len);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header is not valid JSON: ", e.what()));
  }
  if (!header.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": header is a JSON ", header.type_name(), ", expected an object"));
  }
  file->data_ = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      HAP_RETURN_IF_ERROR(ParseMetadata(path, entry, file->metadata_));
      continue;
    }
    TensorInfo info;
    info.name = name;
    HAP_RETURN_IF_ERROR(ParseEntry(path, entry, data_size, info));
    file->tensors_.push_back(std::move(info));
  }

  // Overlap check on the tensors sorted by offset; empty tensors occupy no bytes.
  std::sort(file->tensors_.begin(), file->tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : file->tensors_) {
    if (t.begin == t.end) continue;
    if (prev != nullptr && t.begin < prev->end) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor '", prev->name, "' (data_offsets ", OffsetsString(prev->begin, prev->end),
          ") overlaps tensor '", t.name, "' (data_offsets ", OffsetsString(t.begin, t.end), ")"));
    }
    prev = &t;
  }
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->index_[file->tensors_[i].name] = i;
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              DType dtype, const std::map<std::string, std::string>& metadata) {
  // Header first: validates every tensor before anything touches the disk.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> seen;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const std::string where = absl::StrCat(path, ": tensor '", t.name, "'");
    if (t.name.empty() || t.name == "__metadata__") {
      return absl::InvalidArgumentError(absl::StrCat(where, ": reserved or empty name"));
    }
    if (!seen.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": name given twice"));
    }
    uint64_t numel = 1;
    bool overflow = false;
    for (int64_t d : t.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": shape ", ShapeString(t.shape), " has a negative dimension"));
      }
      overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel);
    }
    uint64_t bytes = 0;
    overflow |= __builtin_mul_overflow(numel, DTypeSize(dtype), &bytes);
    overflow |= __builtin_add_overflow(offset, bytes, &bytes);  // bytes now holds the end
    if (overflow) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": shape ", ShapeString(t.shape), " is too large"));
    }
    if (numel > 0 && t.data == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": no data"));
    }
    header[t.name] = {{"dtype", std::string(DTypeName(dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, bytes}}};
    offset = bytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  const uint64_t header_len = header_text.size();

  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return ErrnoError(errno, absl::StrCat(tmp, ": cannot create"));
  errno = 0;  // so a failed fwrite below reports its own cause
  bool ok = std::fwrite(&header_len, 8, 1, f) == 1 &&
            std::fwrite(header_text.data(), 1, header_len, f) == header_len;
  // Narrow dtypes are converted through a bounded buffer rather than a whole-tensor copy.
  constexpr size_t kChunk = size_t{1} << 16;
  std::vector<uint8_t> buffer(kChunk * DTypeSize(dtype));
  for (const TensorToWrite& t : tensors) {
    size_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<size_t>(d);
    for (size_t i = 0; ok && i < numel; i += kChunk) {
      const size_t n = std::min(kChunk, numel - i);
      ConvertFromF32(dtype, t.data + i, buffer.data(), n);
      ok = std::fwrite(buffer.data(), DTypeSize(dtype), n, f) == n;
    }
  }
  const int write_err = errno;
  if (std::fclose(f) != 0) ok = false;
  if (!ok) {
    std::remove(tmp.c_str());
    return ErrnoError(write_err != 0 ? write_err : EIO, absl::StrCat(tmp, ": write failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return ErrnoError(err, absl::StrCat(path, ": cannot rename ", tmp, " into place"));
  }
  return absl::OkStatus();
}

}  // namespace hap
