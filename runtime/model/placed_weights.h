// The model's weights in a backend's memory. The CPU backend reads the mapped checkpoint in
// place; a device backend gets every tensor uploaded once, in its stored dtype (a tied LM head
// shares the embedding's upload).
#pragma once

#include <initializer_list>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "runtime/io/weights.h"

namespace hap {

// Places weight views in a backend's memory one by one or, for the weights of one product
// batch, back to back; a host tensor placed twice (tied embeddings) is uploaded once. What every
// model family's placement shares.
class WeightPlacer {
 public:
  // Buffers go to *storage and their bytes are added to *bytes (both outlive the placer).
  WeightPlacer(const Backend& backend, std::vector<BackendBuffer>* storage, int64_t* bytes)
      : backend_(backend), storage_(storage), bytes_(bytes) {}

  // Replaces *w (if present) by its view in the backend's memory.
  absl::Status operator()(Weight* w);
  // Places weights of one shape and dtype back to back in one allocation (a decoder layer's
  // q, k and v; gate and up), so that a device backend can run their products as one batched
  // product (the weights a constant stride apart). One by one where that does not hold, and on
  // a backend whose memory is the host's (nothing to gain).
  absl::Status Together(std::initializer_list<Weight*> ws);
  // A decoder's weights (the layers' q, k, v and gate, up together).
  absl::Status PlaceText(TextWeights* t);

 private:
  const Backend& backend_;
  std::vector<BackendBuffer>* storage_;
  int64_t* bytes_;
  std::map<const void*, const void*> placed_;
};

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
