// The model's weights in a backend's memory. The CPU backend reads the mapped checkpoint in
// place; a device backend gets every tensor uploaded once, in its stored dtype (a tied LM head
// shares the embedding's upload).
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "runtime/io/weights.h"

namespace hap {

class PlacedWeights {
 public:
  // Views of `weights` (which must outlive the result) in `backend`'s memory.
  static absl::StatusOr<PlacedWeights> Place(const Backend& backend, const LlavaWeights& weights);

  const VisionWeights& vision() const { return vision_; }
  const ProjectorWeights& projector() const { return projector_; }
  const TextWeights& text() const { return text_; }
  // Bytes uploaded to the backend (0 for the CPU backend).
  int64_t device_bytes() const { return device_bytes_; }

 private:
  VisionWeights vision_;
  ProjectorWeights projector_;
  TextWeights text_;
  std::vector<BackendBuffer> storage_;
  int64_t device_bytes_ = 0;
};

}  // namespace hap
