// A Backend that counts each op by name and forwards it to another backend (the CPU one by
// default): the model tests use it to check which ops a prefill or a decode step makes, and how
// often a device backend copies back to the host. Pruning ops count under their own names too.
// Planned steps run op by op on this backend (Backend::Plan's default), so their ops are counted
// one by one; Plan itself counts as "Plan".
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kernels/backend.h"

namespace hap::testing_support {

// Op counts by name, shared by a CountingBackend and its pruning kernels.
class OpCounts {
 public:
  int count(const std::string& op) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = counts_.find(op);
    return it == counts_.end() ? 0 : it->second;
  }
  void Reset() {
    std::lock_guard<std::mutex> lock(mu_);
    counts_.clear();
  }
  void Count(const char* op) const {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_[op];
  }

 private:
  mutable std::mutex mu_;
  mutable std::map<std::string, int> counts_;
};

#define HAP_FORWARD(op, params, args)     \
  absl::Status op params const override { \
    counts_.Count(#op);                   \
    return inner_.op args;                \
  }

class CountingPruning final : public PruningKernels {
 public:
  CountingPruning(const PruningKernels& inner, const OpCounts& counts)
      : inner_(inner), counts_(counts) {}

  HAP_FORWARD(TextVisualAttention, (const TextVisualAttentionArgs& a), (a))
  HAP_FORWARD(Paq, (const float* m, int n, int t, int v, float* p), (m, n, t, v, p))
  HAP_FORWARD(PaqFromRowEntropies, (const float* m, const double* e, int n, int t, int v, float* p),
              (m, e, n, t, v, p))
  HAP_FORWARD(PaqSoftmaxWeights, (const float* p, int n, double t, float* w), (p, n, t, w))
  HAP_FORWARD(WeightedSumMaps, (const float* const* m, const float* w, int n, int64_t s, float* o),
              (m, w, n, s, o))
  HAP_FORWARD(WeightedSumContiguous, (const float* m, const float* w, int n, int64_t s, float* o),
              (m, w, n, s, o))
  HAP_FORWARD(TokenScores, (const float* m, int64_t r, int v, float* s), (m, r, v, s))
  HAP_FORWARD(TokenScoresOfRows, (const float* m, int64_t r, int v, const int* rs, int n, float* s),
              (m, r, v, rs, n, s))
  HAP_FORWARD(StableTopK, (const float* s, int n, int k, int* kept), (s, n, k, kept))
  HAP_FORWARD(StableTopKToBackend, (const float* s, int n, int k, int32_t* kept), (s, n, k, kept))
  HAP_FORWARD(VisionZipMerge, (const VisionZipMergeArgs& a), (a))

 private:
  const PruningKernels& inner_;
  const OpCounts& counts_;
};

class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(const Backend& inner = CpuBackend())
      : inner_(inner), pruning_(inner.pruning(), counts_) {}

  Device device() const override { return inner_.device(); }
  std::string_view name() const override { return "counting"; }
  BackendCaps caps() const override { return inner_.caps(); }
  const PruningKernels& pruning() const override { return pruning_; }
  absl::StatusOr<std::unique_ptr<PlannedStep>> Plan(StepDesc desc) const override {
    counts_.Count("Plan");
    return Backend::Plan(std::move(desc));
  }
  int count(const std::string& op) const { return counts_.count(op); }
  void Reset() { counts_.Reset(); }

  absl::StatusOr<void*> Allocate(size_t bytes) const override { return inner_.Allocate(bytes); }
  void Free(void* p) const override { inner_.Free(p); }
  absl::StatusOr<void*> AllocateHost(size_t bytes) const override {
    return inner_.AllocateHost(bytes);
  }
  void FreeHost(void* p) const override { inner_.FreeHost(p); }
  HAP_FORWARD(CopyToBackend, (void* d, const void* s, size_t n), (d, s, n))
  HAP_FORWARD(CopyToHost, (void* d, const void* s, size_t n), (d, s, n))
  HAP_FORWARD(Copy, (void* d, const void* s, size_t n), (d, s, n))
  HAP_FORWARD(Synchronize, (), ())
  absl::StatusOr<TensorView> PlaceWeight(const TensorView& h, BackendBuffer* s) const override {
    return inner_.PlaceWeight(h, s);
  }
  int64_t DeviceBytesInUse() const override { return inner_.DeviceBytesInUse(); }
  HAP_FORWARD(StoreF32As, (DType t, const float* s, void* d, int64_t n), (t, s, d, n))
  HAP_FORWARD(Embedding, (const TensorView& t, const int32_t* ids, int n, float* o),
              (t, ids, n, o))
  HAP_FORWARD(Linear,
              (const float* x, const TensorView& w, const float* b, float* y, int m, LinearRows r),
              (x, w, b, y, m, r))
  HAP_FORWARD(RmsNorm, (const float* x, const float* w, float* y, int r, int d, float e),
              (x, w, y, r, d, e))
  HAP_FORWARD(LayerNorm,
              (const float* x, const float* w, const float* b, float* y, int r, int d, float e),
              (x, w, b, y, r, d, e))
  HAP_FORWARD(Rope, (float* x, const int32_t* p, int r, int h, int hd, float t), (x, p, r, h, hd, t))
  HAP_FORWARD(RopeAxes, (const RopeAxesArgs& a), (a))
  HAP_FORWARD(Activate, (Activation k, float* x, int64_t n), (k, x, n))
  HAP_FORWARD(SiluMul, (float* g, const float* u, int64_t n), (g, u, n))
  HAP_FORWARD(Add, (float* y, const float* x, int64_t n), (y, x, n))
  HAP_FORWARD(Attention, (const AttentionArgs& a), (a))
  HAP_FORWARD(DecodeAttention, (const DecodeAttentionArgs& a), (a))
  HAP_FORWARD(StoreKvRows, (const StoreKvRowsArgs& a), (a))
  HAP_FORWARD(GatherRows, (const void* s, int64_t n, size_t rb, const int* i, int64_t ni, void* d),
              (s, n, rb, i, ni, d))
  HAP_FORWARD(GatherKeptRows,
              (const void* s, int n, size_t rb, int vb, int nv, const int32_t* k, int nk, void* d),
              (s, n, rb, vb, nv, k, nk, d))
  HAP_FORWARD(ArgMaxRows, (const float* x, int r, int n, int32_t* ids), (x, r, n, ids))
  HAP_FORWARD(TopLogits, (const TopLogitsArgs& a), (a))

 private:
  const Backend& inner_;
  OpCounts counts_;
  CountingPruning pruning_;
};
#undef HAP_FORWARD

}  // namespace hap::testing_support
