#include "runtime/model/placed_weights.h"

#include "base/status_macros.h"

namespace hap {

absl::Status WeightPlacer::operator()(Weight* w) {
  if (!w->present()) return absl::OkStatus();
  auto it = placed_.find(w->data);
  if (it != placed_.end()) {
    w->data = it->second;
    w->device = backend_.device();
    return absl::OkStatus();
  }
  BackendBuffer buffer;
  HAP_ASSIGN_OR_RETURN(Weight placed, backend_.PlaceWeight(*w, &buffer));
  if (buffer.data() != nullptr) {
    *bytes_ += static_cast<int64_t>(buffer.bytes());
    storage_->push_back(std::move(buffer));
  }
  placed_[w->data] = placed.data;
  *w = std::move(placed);
  return absl::OkStatus();
}

absl::Status WeightPlacer::Together(std::initializer_list<Weight*> ws) {
  const Weight& first = **ws.begin();
  bool together = !backend_.caps().host_memory && ws.size() > 1;
  for (const Weight* w : ws) {
    together = together && w->present() && w->contiguous() && w->device == Device::kCpu &&
               w->dtype == first.dtype && w->shape == first.shape && w->bytes() % 256 == 0 &&
               placed_.count(w->data) == 0;
  }
  if (!together) {
    for (Weight* w : ws) HAP_RETURN_IF_ERROR((*this)(w));
    return absl::OkStatus();
  }
  const size_t each = static_cast<size_t>(first.bytes());
  HAP_ASSIGN_OR_RETURN(BackendBuffer buffer, BackendBuffer::Allocate(backend_, each * ws.size()));
  size_t offset = 0;
  for (Weight* w : ws) {
    void* slice = static_cast<char*>(buffer.data()) + offset;
    HAP_RETURN_IF_ERROR(backend_.CopyToBackend(slice, w->data, each));
    placed_[w->data] = slice;
    *w = Weight(slice, w->dtype, backend_.device(), w->shape);
    offset += each;
  }
  *bytes_ += static_cast<int64_t>(buffer.bytes());
  storage_->push_back(std::move(buffer));
  return absl::OkStatus();
}

absl::Status WeightPlacer::PlaceText(TextWeights* t) {
  for (Weight* w : {&t->embed, &t->norm, &t->lm_head}) HAP_RETURN_IF_ERROR((*this)(w));
  for (LlamaLayerWeights& l : t->layers) {
    for (Weight* w : {&l.attn_norm, &l.q_b, &l.k_b, &l.v_b, &l.o, &l.mlp_norm, &l.down}) {
      HAP_RETURN_IF_ERROR((*this)(w));
    }
    HAP_RETURN_IF_ERROR(Together({&l.q, &l.k, &l.v}));
    HAP_RETURN_IF_ERROR(Together({&l.gate, &l.up}));
  }
  return absl::OkStatus();
}

absl::StatusOr<PlacedWeights> PlacedWeights::Place(const Backend& backend,
                                                   const LlavaWeights& weights) {
  PlacedWeights p;
  p.vision_ = weights.vision();
  p.projector_ = weights.projector();
  p.text_ = weights.text();
  WeightPlacer place(backend, &p.storage_, &p.device_bytes_);
  VisionWeights& v = p.vision_;
  for (Weight* w : {&v.patch_w, &v.class_emb, &v.pos_emb, &v.pre_ln_w, &v.pre_ln_b}) {
    HAP_RETURN_IF_ERROR(place(w));
  }
  for (ClipLayerWeights& l : v.layers) {
    for (Weight* w : {&l.ln1_w, &l.ln1_b, &l.q_b, &l.k_b, &l.v_b, &l.o_w, &l.o_b, &l.ln2_w,
                      &l.ln2_b, &l.fc1_w, &l.fc1_b, &l.fc2_w, &l.fc2_b}) {
      HAP_RETURN_IF_ERROR(place(w));
    }
    HAP_RETURN_IF_ERROR(place.Together({&l.q_w, &l.k_w, &l.v_w}));
  }
  ProjectorWeights& pr = p.projector_;
  for (Weight* w : {&pr.l1_w, &pr.l1_b, &pr.l2_w, &pr.l2_b}) HAP_RETURN_IF_ERROR(place(w));
  HAP_RETURN_IF_ERROR(place.PlaceText(&p.text_));
  return p;
}

}  // namespace hap
