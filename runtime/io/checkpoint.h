// The tensors of a Hugging Face checkpoint directory (model.safetensors, or the shards that
// model.safetensors.index.json lists), catalogued under one naming convention, checked against
// the tensors a model expects and taken as views: what every model family's weight loader
// shares (runtime/io/weights.h for LLaVA, runtime/io/qwen_weights.h for Qwen2.5-VL).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "runtime/io/safetensors.h"

namespace hap {

struct ExpectedTensor {
  std::string name;  // the canonical name (the model family's loader says which convention)
  std::vector<int64_t> shape;
  // True for tensors the model never reads (LLaVA's vision layers past vision_feature_layer and
  // post_layernorm): checked for shape when present, tolerated when absent.
  bool optional = false;
};

class Checkpoint {
 public:
  // Maps a tensor name as stored to the canonical one (the identity for one convention only).
  using CanonicalName = std::function<std::string(std::string_view)>;

  // Opens model_dir's safetensors files. A tensor found twice under one canonical name (in two
  // shards, or under both conventions) is an error: which copy to use would be a guess.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& model_dir,
                                                          const CanonicalName& canonical);
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  // Presence and shape of each expected tensor `wanted` accepts, before anything is converted:
  // NotFound names the missing tensor and the file that should hold it, InvalidArgument the
  // tensor whose shape differs and both shapes.
  absl::Status Check(const std::vector<ExpectedTensor>& expected,
                     const std::function<bool(std::string_view)>& wanted) const;

  // A matrix read as stored (F32, BF16 or F16) in place; an absent tensor gives a view with null
  // data. Only for tensors Check accepted.
  TensorView Matrix(const std::string& name);
  // A tensor read element by element, as F32: in place when stored F32 and aligned, otherwise
  // converted once into a buffer this object owns.
  TensorView Vector(const std::string& name);

  // Bytes of F32 buffers this object owns (converted or realigned tensors).
  int64_t converted_bytes() const { return converted_bytes_; }
  // Bytes of the tensors taken, as stored in the checkpoint (what their views read).
  int64_t stored_bytes() const { return stored_bytes_; }
  // Bytes of the safetensors files mapped (and kept mapped for the object's lifetime).
  int64_t mapped_bytes() const { return mapped_bytes_; }

 private:
  // Where one tensor of the checkpoint lives.
  struct Located {
    const SafetensorsFile* file;
    const TensorInfo* info;
  };
  Checkpoint() = default;
  absl::Status Register(const SafetensorsFile& file);
  absl::Status OpenSharded(const std::string& dir);
  TensorView Take(const std::string& name, bool stored);

  CanonicalName canonical_;
  std::string source_;  // names the checkpoint in "missing tensor" errors
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Located> catalog_;
  std::vector<std::unique_ptr<float[]>> owned_;
  int64_t converted_bytes_ = 0;
  int64_t stored_bytes_ = 0;
  int64_t mapped_bytes_ = 0;
};

}  // namespace hap
