// Checkpoint: a model directory's safetensors files as one catalogue of tensor views.
#include "runtime/io/checkpoint.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace hap {
namespace {

using Json = nlohmann::json;

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

// A shard name from the index must be a plain file name inside the model directory.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

// Whether `path` names something. A path the OS cannot even look up (too long, a component that is
// a file) counts as absent: the throwing overload of std::filesystem::exists would abort instead.
bool PathExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec) && !ec;
}

}  // namespace

absl::Status Checkpoint::Register(const SafetensorsFile& file) {
  for (const TensorInfo& t : file.tensors()) {
    auto [it, inserted] = catalog_.emplace(canonical_(t.name), Located{&file, &t});
    if (!inserted) {
      const Located& first = it->second;
      return absl::InvalidArgumentError(absl::StrCat("tensor '", it->first, "' appears twice: as '",
                                                     first.info->name, "' in ", first.file->path(),
                                                     " and as '", t.name, "' in ", file.path()));
    }
  }
  return absl::OkStatus();
}

// Opens the shards named by the index and checks the index against them.
absl::Status Checkpoint::OpenSharded(const std::string& dir) {
  const std::string index_path = absl::StrCat(dir, "/", kIndexFile);
  HAP_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
  Json index;
  try {
    index = Json::parse(text);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": malformed JSON: ", e.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": expected an object with a \"weight_map\" object"));
  }
  if (index.contains("metadata") && !index["metadata"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": \"metadata\" is a JSON ",
                                                   index["metadata"].type_name(),
                                                   ", expected an object"));
  }
  const Json& weight_map = index["weight_map"];
  if (weight_map.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map is empty"));
  }
  std::map<std::string, std::string> shard_of;  // tensor -> shard file name
  for (const auto& [tensor, shard] : weight_map.items()) {
    if (!shard.is_string() || !IsPlainFileName(shard.get<std::string>())) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map['", tensor, "'] is ",
                                                     shard.dump(),
                                                     ", expected a file name in the same folder"));
    }
    shard_of[tensor] = shard.get<std::string>();
  }
  std::map<std::string, const SafetensorsFile*> opened;
  for (const auto& [tensor, shard] : shard_of) {
    if (opened.count(shard)) continue;
    const std::string path = absl::StrCat(dir, "/", shard);
    if (!PathExists(path)) {
      return absl::NotFoundError(absl::StrCat(
          index_path, ": shard '", shard, "' (named for tensor '", tensor, "') does not exist"));
    }
    HAP_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
    HAP_RETURN_IF_ERROR(Register(*file));
    opened[shard] = file.get();
    files_.push_back(std::move(file));
  }
  for (const auto& [tensor, shard] : shard_of) {
    if (opened[shard]->Find(tensor) == nullptr) {
      return absl::NotFoundError(absl::StrCat(index_path, ": tensor '", tensor,
                                              "' is missing from its shard '", shard, "'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& model_dir,
                                                             const CanonicalName& canonical) {
  std::unique_ptr<Checkpoint> c(new Checkpoint);
  c->canonical_ = canonical;
  const std::string single_path = absl::StrCat(model_dir, "/", kSingleFile);
  if (PathExists(absl::StrCat(model_dir, "/", kIndexFile))) {
    c->source_ = absl::StrCat(model_dir, "/", kIndexFile);
    HAP_RETURN_IF_ERROR(c->OpenSharded(model_dir));
  } else if (PathExists(single_path)) {
    c->source_ = single_path;
    HAP_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(single_path));
    HAP_RETURN_IF_ERROR(c->Register(*file));
    c->files_.push_back(std::move(file));
  } else {
    return absl::NotFoundError(
        absl::StrCat(model_dir, ": neither ", kSingleFile, " nor ", kIndexFile, " exists"));
  }
  for (const auto& f : c->files_) c->mapped_bytes_ += static_cast<int64_t>(f->file_size());
  return c;
}

absl::Status Checkpoint::Check(const std::vector<ExpectedTensor>& expected,
                               const std::function<bool(std::string_view)>& wanted) const {
  for (const ExpectedTensor& e : expected) {
    if (!wanted(e.name)) continue;
    auto it = catalog_.find(e.name);
    if (it == catalog_.end()) {
      if (e.optional) continue;
      return absl::NotFoundError(
          absl::StrCat(source_, ": tensor '", e.name, "' ", ShapeString(e.shape), " is missing"));
    }
    const TensorInfo& info = *it->second.info;
    if (info.shape != e.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(it->second.file->path(), ": tensor '", info.name, "': shape ",
                       ShapeString(info.shape), ", expected ", ShapeString(e.shape)));
    }
  }
  return absl::OkStatus();
}

TensorView Checkpoint::Take(const std::string& name, bool stored) {
  auto it = catalog_.find(name);
  if (it == catalog_.end()) return TensorView{};
  const SafetensorsFile& file = *it->second.file;
  const TensorInfo& info = *it->second.info;
  TensorView weight;
  weight.shape = info.shape;
  weight.dtype = info.dtype;
  const uint8_t* src = file.Data(info);
  stored_bytes_ += weight.bytes();
  const bool aligned_f32 =
      info.dtype == DType::kF32 && reinterpret_cast<uintptr_t>(src) % alignof(float) == 0;
  if (aligned_f32 || (stored && info.dtype != DType::kF32)) {
    weight.data = src;
    return weight;
  }
  const int64_t n = info.numel();
  auto buffer = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(n));
  ConvertToF32(info.dtype, src, buffer.get(), static_cast<size_t>(n));
  weight.data = buffer.get();
  weight.dtype = DType::kF32;
  converted_bytes_ += n * static_cast<int64_t>(sizeof(float));
  owned_.push_back(std::move(buffer));
  return weight;
}

TensorView Checkpoint::Matrix(const std::string& name) { return Take(name, /*stored=*/true); }
TensorView Checkpoint::Vector(const std::string& name) { return Take(name, /*stored=*/false); }

}  // namespace hap
