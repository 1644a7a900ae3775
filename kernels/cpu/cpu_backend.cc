// The CPU backend: each op forwards to its kernel in kernels/cpu or kernels/cpu/prune; steps run op by
// op (Backend::Plan's default).
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/decode_attention.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cpu/prune/attention_rows.h"
#include "kernels/cpu/prune/gather_rows.h"
#include "kernels/cpu/prune/paq.h"
#include "kernels/cpu/prune/paq_softmax.h"
#include "kernels/cpu/prune/token_scores.h"
#include "kernels/cpu/prune/topk.h"
#include "kernels/cpu/prune/visionzip_merge.h"
#include "kernels/cpu/prune/weighted_sum.h"

namespace hap {
namespace {

class CpuPruning final : public PruningKernels {
 public:
  absl::Status TextVisualAttention(const TextVisualAttentionArgs& args) const override {
    return kernels::TextVisualAttention(args);
  }
  absl::Status Paq(const float* maps, int n_maps, int n_text, int n_vis,
                   float* paq) const override {
    return kernels::Paq(maps, n_maps, n_text, n_vis, paq);
  }
  absl::Status PaqFromRowEntropies(const float* maps, const double* row_entropy, int n_maps,
                                   int n_text, int n_vis, float* paq) const override {
    return kernels::PaqFromRowEntropies(maps, row_entropy, n_maps, n_text, n_vis, paq);
  }
  absl::Status PaqSoftmaxWeights(const float* paq, int n, double temperature,
                                 float* weights) const override {
    return kernels::PaqSoftmaxWeights(paq, n, temperature, weights);
  }
  absl::Status WeightedSumMaps(const float* const* maps, const float* weights, int n_maps,
                               int64_t size, float* out) const override {
    return kernels::WeightedSumMaps(maps, weights, n_maps, size, out);
  }
  absl::Status WeightedSumContiguous(const float* maps, const float* weights, int n_maps,
                                     int64_t size, float* out) const override {
    return kernels::WeightedSumContiguous(maps, weights, n_maps, size, out);
  }
  absl::Status TokenScores(const float* map, int64_t n_rows, int n_vis,
                           float* scores) const override {
    return kernels::TokenScores(map, n_rows, n_vis, scores);
  }
  absl::Status TokenScoresOfRows(const float* map, int64_t n_rows, int n_vis, const int* rows,
                                 int n_sel, float* scores) const override {
    return kernels::TokenScoresOfRows(map, n_rows, n_vis, rows, n_sel, scores);
  }
  absl::Status StableTopK(const float* scores, int n, int k, int* kept) const override {
    return kernels::StableTopK(scores, n, k, kept);
  }
  absl::Status StableTopKToBackend(const float* scores, int n, int k,
                                   int32_t* kept) const override {
    return kernels::StableTopK(scores, n, k, kept);
  }
  absl::Status VisionZipMerge(const VisionZipMergeArgs& args) const override {
    return kernels::VisionZipMerge(args);
  }
};

class Cpu final : public Backend {
 public:
  Device device() const override { return Device::kCpu; }
  std::string_view name() const override { return "cpu"; }
  BackendCaps caps() const override {
    BackendCaps caps;
    caps.host_memory = true;
    return caps;
  }
  const PruningKernels& pruning() const override { return pruning_; }

  absl::StatusOr<void*> Allocate(size_t bytes) const override {
    if (bytes == 0) return nullptr;
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("cpu backend: cannot allocate %d bytes", bytes));
    }
    return p;
  }
  void Free(void* ptr) const override { std::free(ptr); }
  // Host memory is the backend's: staging is ordinary memory, and a copy from it is a memmove.
  absl::StatusOr<void*> AllocateHost(size_t bytes) const override { return Allocate(bytes); }
  void FreeHost(void* ptr) const override { Free(ptr); }
  absl::Status CopyToBackend(void* dst, const void* host_src, size_t bytes) const override {
    if (bytes > 0) std::memmove(dst, host_src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes) const override {
    if (bytes > 0) std::memmove(host_dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Copy(void* dst, const void* src, size_t bytes) const override {
    if (bytes > 0) std::memmove(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Synchronize() const override { return absl::OkStatus(); }
  absl::StatusOr<TensorView> PlaceWeight(const TensorView& host,
                                         BackendBuffer* storage) const override {
    if (host.device != Device::kCpu) {
      return absl::InvalidArgumentError("cpu backend: weight " + host.Describe() +
                                        " is not in host memory");
    }
    if (host.contiguous()) return host;  // used where it is mapped
    // A strided view (a column range of a larger matrix) is packed once into `storage`.
    HAP_ASSIGN_OR_RETURN(*storage, BackendBuffer::Allocate(*this, host.bytes()));
    HAP_RETURN_IF_ERROR(CopyToContiguous(host, storage->data()));
    TensorView placed = host;
    placed.data = storage->data();
    placed.strides.clear();
    return placed;
  }
  int64_t DeviceBytesInUse() const override { return 0; }
  absl::Status StoreF32As(DType dtype, const float* src, void* dst, int64_t n) const override {
    ConvertFromF32(dtype, src, dst, static_cast<size_t>(n));
    return absl::OkStatus();
  }

  absl::Status Embedding(const TensorView& table, const int32_t* ids, int n,
                         float* out) const override {
    if (table.shape.size() != 2 || !table.contiguous()) {
      return absl::InvalidArgumentError("Embedding: table must be a contiguous [vocab, d], got " +
                                        table.Describe());
    }
    const int64_t d = table.shape[1];
    const int64_t row_bytes = d * static_cast<int64_t>(DTypeSize(table.dtype));
    for (int i = 0; i < n; ++i) {
      const auto* row = static_cast<const uint8_t*>(table.data) + ids[i] * row_bytes;
      ConvertToF32(table.dtype, row, out + i * d, static_cast<size_t>(d));
    }
    return absl::OkStatus();
  }

  absl::Status Linear(const float* x, const TensorView& w, const float* bias, float* y, int m,
                      LinearRows rows) const override {
    return cpu::Linear(x, w, bias, y, m, rows);
  }
  absl::Status RmsNorm(const float* x, const float* w, float* y, int rows, int d,
                       float eps) const override {
    return cpu::RmsNorm(x, w, y, rows, d, eps);
  }
  absl::Status LayerNorm(const float* x, const float* w, const float* b, float* y, int rows,
                         int d, float eps) const override {
    return cpu::LayerNorm(x, w, b, y, rows, d, eps);
  }
  absl::Status Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
                    float theta) const override {
    return cpu::Rope(x, positions, rows, n_heads, head_dim, theta);
  }
  absl::Status RopeAxes(const RopeAxesArgs& args) const override { return cpu::RopeAxes(args); }
  absl::Status Activate(Activation kind, float* x, int64_t n) const override {
    switch (kind) {
      case Activation::kQuickGelu:
        cpu::QuickGelu(x, n);
        break;
      case Activation::kGelu:
        cpu::Gelu(x, n);
        break;
      case Activation::kGeluTanh:
        cpu::GeluTanh(x, n);
        break;
    }
    return absl::OkStatus();
  }
  absl::Status SiluMul(float* gate, const float* up, int64_t n) const override {
    cpu::SiluMul(gate, up, n);
    return absl::OkStatus();
  }
  absl::Status Add(float* y, const float* x, int64_t n) const override {
    cpu::AddInPlace(y, x, n);
    return absl::OkStatus();
  }
  absl::Status Attention(const AttentionArgs& args) const override {
    return cpu::Attention(args);
  }
  absl::Status DecodeAttention(const DecodeAttentionArgs& args) const override {
    return cpu::DecodeAttention(args);
  }
  absl::Status StoreKvRows(const StoreKvRowsArgs& args) const override {
    return cpu::StoreKvRows(args);
  }
  absl::Status GatherRows(const void* src, int64_t n_rows, size_t row_bytes, const int* idx,
                          int64_t n_idx, void* dst) const override {
    return kernels::GatherRows(src, 1, n_rows, row_bytes, idx, n_idx, dst);
  }
  absl::Status GatherKeptRows(const void* src, int n_tokens, size_t row_bytes, int vis_begin,
                              int n_vis, const int32_t* kept, int n_kept,
                              void* dst) const override {
    return kernels::GatherKeptRows(src, n_tokens, row_bytes, vis_begin, n_vis, kept, n_kept, dst);
  }
  absl::Status ArgMaxRows(const float* logits, int rows, int n, int32_t* ids) const override {
    return cpu::ArgMaxRows(logits, rows, n, ids);
  }
  absl::Status TopLogits(const TopLogitsArgs& args) const override { return cpu::TopLogits(args); }

 private:
  CpuPruning pruning_;
};

}  // namespace

void ConfigureCpuBackend(int n_threads, int spin_us) { cpu::SetComputeThreads(n_threads, spin_us); }

const Backend& CpuBackend() {
  static const Cpu* backend = new Cpu();
  return *backend;
}

}  // namespace hap
