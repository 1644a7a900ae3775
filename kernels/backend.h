// The backend interface: every op the model and the pruning methods run, behind one virtual
// table, so that the model code (runtime/model, runtime/prune) names no kernel of its own and
// another backend (CUDA, issue 17) slots in beside the CPU one. docs/design.md §6.
//
// Memory. Unless a comment says "host", a pointer is in the backend's memory (host memory for
// the CPU backend; device memory for a GPU backend) and the op is ordered after earlier ops on
// the same backend (a GPU backend runs them on one stream per calling thread). Weights arrive
// as TensorViews whose device names where they live. Results that decide control flow on the
// host are host pointers, and are the only points where a GPU backend waits for its stream:
// StableTopK's kept indices (once per pruning stage) and the per-head/per-layer PAQ scalars
// the statistics report; the logits the sampler reads are copied out by the caller.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "base/tensor.h"
#include "kernels/op_args.h"
#include "kernels/prune/attention_rows.h"

namespace hap {

enum class Activation { kQuickGelu, kGelu, kGeluTanh };

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string_view name() const = 0;

  // --- Dense ops (kernels/cpu/*.h document the CPU versions' arithmetic) ---
  // y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]); w in F32, BF16 or F16 as stored, F32 accumulation.
  virtual absl::Status Linear(const float* x, const TensorView& w, const float* bias, float* y,
                              int m, LinearRows rows) const = 0;
  virtual absl::Status RmsNorm(const float* x, const float* w, float* y, int rows, int d,
                               float eps) const = 0;
  virtual absl::Status LayerNorm(const float* x, const float* w, const float* b, float* y,
                                 int rows, int d, float eps) const = 0;
  // positions: one original position id per row (host memory is not assumed: backend memory).
  virtual absl::Status Rope(float* x, const int32_t* positions, int rows, int n_heads,
                            int head_dim, float theta) const = 0;
  virtual absl::Status Activate(Activation kind, float* x, int64_t n) const = 0;
  // gate = silu(gate) · up
  virtual absl::Status SiluMul(float* gate, const float* up, int64_t n) const = 0;
  // y += x
  virtual absl::Status Add(float* y, const float* x, int64_t n) const = 0;
  // Prefill attention with each row's log-sum-exp (args.lse) for the pruning methods.
  virtual absl::Status Attention(const AttentionArgs& args) const = 0;
  // One query row over a cache held as spans (paged blocks or one contiguous run).
  virtual absl::Status DecodeAttention(const DecodeAttentionArgs& args) const = 0;
  // dst[i] = src[idx[i]] for rows of row_bytes bytes out of n_rows (idx: host, in range); dst
  // may be src when idx ascends — compaction of hidden states, position ids and KV rows after a
  // pruning stage.
  virtual absl::Status GatherRows(const void* src, int64_t n_rows, size_t row_bytes,
                                  const int* idx, int64_t n_idx, void* dst) const = 0;

  // --- Pruning ops (kernels/prune/*.h) ---
  virtual absl::Status TextVisualAttention(const kernels::TextVisualAttentionArgs& args) const = 0;
  // paq: host, one value per map.
  virtual absl::Status Paq(const float* maps, int n_maps, int n_text, int n_vis,
                           float* paq) const = 0;
  virtual absl::Status PaqFromRowEntropies(const float* maps, const double* row_entropy,
                                           int n_maps, int n_text, int n_vis,
                                           float* paq) const = 0;
  // paq and weights: host (n is heads or layers).
  virtual absl::Status PaqSoftmaxWeights(const float* paq, int n, float* weights) const = 0;
  // weights: host. maps: a host array of n_maps map pointers.
  virtual absl::Status WeightedSumMaps(const float* const* maps, const float* weights, int n_maps,
                                       int64_t size, float* out) const = 0;
  virtual absl::Status WeightedSumContiguous(const float* maps, const float* weights, int n_maps,
                                             int64_t size, float* out) const = 0;
  virtual absl::Status TokenScores(const float* map, int64_t n_rows, int n_vis,
                                   float* scores) const = 0;
  // rows: host.
  virtual absl::Status TokenScoresOfRows(const float* map, int64_t n_rows, int n_vis,
                                         const int* rows, int n_sel, float* scores) const = 0;
  // kept: host, k indices strictly ascending (score descending, ties to the lower index).
  virtual absl::Status StableTopK(const float* scores, int n, int k, int* kept) const = 0;
};

// The CPU backend (kernels/cpu, kernels/prune): host memory, the default thread pool.
const Backend& CpuBackend();
// Sizes the CPU backend's compute before its first op: pool threads (<= 0: all cores) and how
// long they spin for the next op before sleeping (ThreadPool).
void ConfigureCpuBackend(int n_threads, int spin_us);

}  // namespace hap
