#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/overloaded.h"
#include "base/status_macros.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/add.h"
#include "kernels/cuda/argmax.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/block_cache.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gather_rows.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/graph.h"
#include "kernels/cuda/hap_scoring.h"
#include "kernels/cuda/ipc.h"
#include "kernels/cuda/layer_norm.h"
#include "kernels/cuda/paq.h"
#include "kernels/cuda/paq_softmax.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/text_visual_attention.h"
#include "kernels/cuda/token_scores.h"
#include "kernels/cuda/top_logits.h"
#include "kernels/cuda/topk.h"
#include "kernels/cuda/visionzip_merge.h"
#include "kernels/cuda/weighted_sum.h"
#include "kernels/op_checks.h"

namespace hap {
namespace {

using cuda::KernelStatus;

absl::Status ToStatus(const KernelStatus& s) {
  if (s.ok) return absl::OkStatus();
  if (s.out_of_memory) return absl::ResourceExhaustedError("cuda: " + s.message);
  return absl::InternalError("cuda: " + s.message);
}

#define HAP_CUDA_RETURN_IF_ERROR(expr) HAP_RETURN_IF_ERROR(ToStatus(expr))

cuda::ElemType ElemOf(DType d) {
  return d == DType::kBF16  ? cuda::ElemType::kBF16
         : d == DType::kF16 ? cuda::ElemType::kF16
                            : cuda::ElemType::kF32;
}

// Fails unless [ptr, ptr + bytes) is device memory (the emulation can tell; a GPU build passes).
absl::Status CheckDevice(const void* ptr, size_t bytes, const char* op, const char* what) {
  if (bytes == 0 || cuda::IsDeviceRange(ptr, bytes)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("cuda %s: %s (%d bytes) is not device memory", op, what, bytes));
}

// A weight as the products take it: a contiguous matrix in device memory.
absl::Status CheckWeight(const TensorView& w, const char* op) {
  if (w.device != Device::kCuda || w.shape.size() != 2 || !w.contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cuda %s: weight %s must be a contiguous 2-d view in device memory "
                        "(Backend::PlaceWeight)",
                        op, w.Describe()));
  }
  return CheckDevice(w.data, static_cast<size_t>(w.bytes()), op, "weight");
}

// What RmsNorm reads and writes, in device memory: x and y F32 [rows, d], w F32 [d].
absl::Status CheckRmsNorm(const float* x, const float* w, const float* y, int rows, int d) {
  HAP_RETURN_IF_ERROR(CheckDevice(x, sizeof(float) * rows * d, "RmsNorm", "x"));
  HAP_RETURN_IF_ERROR(CheckDevice(w, sizeof(float) * d, "RmsNorm", "w"));
  return CheckDevice(y, sizeof(float) * rows * d, "RmsNorm", "y");
}

// What prefill attention reads and writes, in device memory: q and out F32 [n_q, heads·hd], k
// and v F32 [n_kv, kv_heads·hd], lse F32 [heads, n_q] when given.
absl::Status CheckAttention(const AttentionArgs& a) {
  const size_t q_bytes = sizeof(float) * a.n_q * a.n_heads * a.head_dim;
  const size_t kv_bytes = sizeof(float) * a.n_kv * a.n_kv_heads * a.head_dim;
  HAP_RETURN_IF_ERROR(CheckDevice(a.q, q_bytes, "Attention", "q"));
  HAP_RETURN_IF_ERROR(CheckDevice(a.k, kv_bytes, "Attention", "k"));
  HAP_RETURN_IF_ERROR(CheckDevice(a.v, kv_bytes, "Attention", "v"));
  HAP_RETURN_IF_ERROR(CheckDevice(a.out, q_bytes, "Attention", "out"));
  if (a.n_segments > 0) {
    HAP_RETURN_IF_ERROR(CheckDevice(a.segment_bounds, sizeof(int32_t) * (a.n_segments + size_t{1}),
                                    "Attention", "segment_bounds"));
  }
  if (a.lse == nullptr) return absl::OkStatus();
  return CheckDevice(a.lse, sizeof(float) * a.n_heads * a.n_q, "Attention", "lse");
}

// A product's weight, output y F32 [m, n] and optional bias F32 [n] (its x is the caller's to
// check: F32, or already rounded).
absl::Status CheckProduct(const TensorView& w, const float* bias, const float* y, int m) {
  HAP_RETURN_IF_ERROR(CheckWeight(w, "Linear"));
  const int64_t n = w.shape[0];
  HAP_RETURN_IF_ERROR(CheckDevice(y, sizeof(float) * m * n, "Linear", "y"));
  if (bias == nullptr) return absl::OkStatus();
  return CheckDevice(bias, sizeof(float) * n, "Linear", "bias");
}

// A DecodeAttention's own workspace (DecodeAttentionArgs::workspace): room for `part_bytes` of
// the slices' partial results, in device memory.
absl::Status CheckDecodeWorkspace(const DecodeAttentionArgs& a, size_t part_bytes) {
  if (a.workspace_bytes < part_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("DecodeAttention: a workspace of %d bytes where its %d slices need %d",
                        a.workspace_bytes, cuda::DecodeAttentionSlices(a.max_rows), part_bytes));
  }
  return CheckDevice(a.workspace, part_bytes, "DecodeAttention", "workspace");
}

// FailedPrecondition for `what`, which a graph cannot hold (Backend::Capture).
absl::Status NotWhileCapturing(const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat(what,
                   " while capturing a graph (Backend::Capture records only ops that "
                   "neither wait for the device nor allocate)"));
}

// What one calling thread owns: its stream, its product context and a scratch area for the
// small host arrays some ops take (indices, span tables, weights), uploaded per call.
class ThreadContext {
 public:
  ~ThreadContext() {
    gemm_.reset();
    if (head_counters_ != nullptr) cuda::DeviceFree(head_counters_);
    if (scratch_ != nullptr) cuda::DeviceFree(scratch_);
    if (stream_ != nullptr) cuda::DestroyStream(stream_);
  }

  absl::Status Init() {
    if (ready_) return absl::OkStatus();
    HAP_CUDA_RETURN_IF_ERROR(cuda::CreateStream(&stream_));
    HAP_CUDA_RETURN_IF_ERROR(cuda::Gemm::Create(stream_, &gemm_));
    ready_ = true;
    return absl::OkStatus();
  }
  cuda::Stream stream() const { return stream_; }
  cuda::Gemm& gemm() { return *gemm_; }

  // Makes room for `bytes` of uploads in this op (call once per op, before Upload).
  absl::Status Reserve(size_t bytes) {
    used_ = 0;
    if (bytes <= scratch_bytes_) return absl::OkStatus();
    if (cuda::Capturing()) return NotWhileCapturing("growing an op's scratch area (an allocation)");
    // Earlier ops on the stream may still read the old scratch.
    HAP_CUDA_RETURN_IF_ERROR(cuda::Synchronize(stream_));
    if (scratch_ != nullptr) cuda::DeviceFree(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    const size_t grown = std::max(bytes, size_t{64} << 10);
    HAP_CUDA_RETURN_IF_ERROR(cuda::DeviceAlloc(&scratch_, grown));
    scratch_bytes_ = grown;
    ++scratch_generation_;
    return absl::OkStatus();
  }
  // `bytes` of the reserved scratch, valid until the next Reserve on this thread.
  absl::StatusOr<void*> Take(size_t bytes) {
    const size_t at = (used_ + 255) / 256 * 256;
    if (at + bytes > scratch_bytes_) return absl::InternalError("cuda: scratch not reserved");
    used_ = at + bytes;
    return static_cast<char*>(scratch_) + at;
  }
  // Copies `bytes` of host memory into the reserved scratch; returns the device copy.
  absl::StatusOr<void*> Upload(const void* host, size_t bytes) {
    // A replay would read the caller's array wherever it is by then.
    if (cuda::Capturing()) return NotWhileCapturing("an op that uploads host arrays of its own");
    HAP_ASSIGN_OR_RETURN(void* dst, Take(bytes));
    HAP_CUDA_RETURN_IF_ERROR(
        cuda::Copy(dst, host, bytes, cuda::CopyKind::kHostToDevice, stream_));
    return dst;
  }
  static size_t Padded(size_t bytes) { return (bytes + 255) / 256 * 256; }
  // Changes whenever the scratch area or the products' rounding scratch moves: a graph whose ops
  // use them is stale after that.
  uint64_t scratch_generation() const {
    return scratch_generation_ + (gemm_ != nullptr ? gemm_->scratch_generation() : 0);
  }
  // kMaxCountedHeads counters for the ops whose last block finishes the op
  // (TextVisualAttentionPaq, PaqSoftmaxSumScoresTopKToBackend) on this thread's stream, made zero
  // on first use; each call leaves them zero, so the ops of one stream share them.
  static constexpr int kMaxCountedHeads = 1024;
  absl::StatusOr<unsigned*> HeadCounters() {
    if (head_counters_ != nullptr) return head_counters_;
    if (cuda::Capturing()) return NotWhileCapturing("making the heads' counters (an allocation)");
    constexpr size_t kBytes = sizeof(unsigned) * kMaxCountedHeads;
    void* counters = nullptr;
    HAP_CUDA_RETURN_IF_ERROR(cuda::DeviceAlloc(&counters, kBytes));
    const cuda::KernelStatus zeroed = cuda::Fill(counters, 0, kBytes, stream_);
    if (!zeroed.ok) {
      cuda::DeviceFree(counters);
      return ToStatus(zeroed);
    }
    head_counters_ = static_cast<unsigned*>(counters);
    return head_counters_;
  }
  // Reserve + Take / Upload for the ops that need a single scratch array.
  absl::StatusOr<void*> ReserveAndTake(size_t bytes) {
    HAP_RETURN_IF_ERROR(Reserve(Padded(bytes)));
    return Take(bytes);
  }
  absl::StatusOr<void*> ReserveAndUpload(const void* host, size_t bytes) {
    HAP_RETURN_IF_ERROR(Reserve(Padded(bytes)));
    return Upload(host, bytes);
  }

 private:
  bool ready_ = false;
  cuda::Stream stream_ = nullptr;
  std::unique_ptr<cuda::Gemm> gemm_;
  unsigned* head_counters_ = nullptr;  // HeadCounters()
  void* scratch_ = nullptr;
  uint64_t scratch_generation_ = 0;  // how many times scratch_ was (re)allocated
  size_t scratch_bytes_ = 0;
  size_t used_ = 0;
};

absl::StatusOr<ThreadContext*> Context() {
  thread_local ThreadContext context;
  HAP_RETURN_IF_ERROR(context.Init());
  return &context;
}

// Copies device memory to the host on the calling thread's stream: a wait for that stream.
absl::Status DeviceToHost(void* dst, const void* src, size_t bytes) {
  if (cuda::Capturing()) return NotWhileCapturing("a copy to the host (a wait for the device)");
  HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
  return ToStatus(cuda::Copy(dst, src, bytes, cuda::CopyKind::kDeviceToHost, c->stream()));
}

// RoPE's cos/sin table for θ and head_dim (cuda::RopeTable) covering positions [0, positions) at
// least: made on first use (an allocation and one wait for the device, so that every thread's
// stream may read it at once), grown by doubling when a step has more rows than it covers, and
// kept for the process (a step on another thread may still read an outgrown one). Positions
// past it have their angles computed where they are needed (FlashRopeArgs).
struct RopeTableView {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int positions = 0;
};
absl::StatusOr<RopeTableView> RopeTableFor(float theta, int head_dim, int positions) {
  // Covers LLaMA's 4096 positions from the first step on.
  constexpr int kMinRopeTablePositions = 4096;
  static std::mutex mu;
  static auto* tables = new std::map<std::pair<uint32_t, int>, RopeTableView>();
  static auto* outgrown = new std::vector<RopeTableView>();
  std::lock_guard<std::mutex> lock(mu);
  uint32_t theta_bits;
  std::memcpy(&theta_bits, &theta, sizeof(theta_bits));
  RopeTableView& table = (*tables)[{theta_bits, head_dim}];
  if (table.positions >= positions) return table;
  if (cuda::Capturing()) return NotWhileCapturing("making RoPE's cos/sin table (an allocation)");
  int grown = std::max(kMinRopeTablePositions, table.positions);
  while (grown < positions) grown *= 2;
  const size_t bytes = sizeof(float) * grown * static_cast<size_t>(head_dim / 2);
  void* cos = nullptr;
  void* sin = nullptr;
  HAP_CUDA_RETURN_IF_ERROR(cuda::DeviceAlloc(&cos, bytes));
  if (const KernelStatus st = cuda::DeviceAlloc(&sin, bytes); !st.ok) {
    cuda::DeviceFree(cos);
    return ToStatus(st);
  }
  HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
  HAP_CUDA_RETURN_IF_ERROR(cuda::RopeTable(static_cast<float*>(cos), static_cast<float*>(sin),
                                           grown, head_dim, theta, c->stream()));
  HAP_CUDA_RETURN_IF_ERROR(cuda::Synchronize(c->stream()));
  if (table.positions > 0) outgrown->push_back(table);
  table = {static_cast<const float*>(cos), static_cast<const float*>(sin), grown};
  return table;
}

// A captured graph (Backend::Capture), replayed on the stream of the thread that captured it:
// its ops may use that thread's scratch area (an op's workspace, a decode's partial results), so
// a replay from another thread, or after an op on this one moved the scratch, is refused.
class CudaGraph final : public BackendGraph {
 public:
  CudaGraph(cuda::Graph* graph, const ThreadContext* owner)
      : graph_(graph), owner_(owner), generation_(owner->scratch_generation()) {}
  ~CudaGraph() override { cuda::DestroyGraph(graph_); }
  absl::Status Replay() const override {
    if (cuda::Capturing()) return NotWhileCapturing("a replay");
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    if (c != owner_) {
      return absl::FailedPreconditionError(
          "a graph replays on the thread that captured it (its ops may use that thread's scratch "
          "area)");
    }
    if (c->scratch_generation() != generation_) {
      return absl::FailedPreconditionError(
          "the thread's scratch area moved since this graph was captured (an op needed more): "
          "capture it again");
    }
    return ToStatus(cuda::Replay(graph_, c->stream()));
  }

 private:
  cuda::Graph* graph_;
  const ThreadContext* owner_;
  uint64_t generation_;
};

// A PAQ-softmax temperature must be finite and > 0, as on the CPU backend.
absl::Status CheckTemperature(const char* op, double temperature) {
  if (std::isfinite(temperature) && temperature > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: temperature %g is not a finite positive number", op, temperature));
}

class CudaPruning final : public PruningKernels {
 public:
  absl::Status TextVisualAttention(const TextVisualAttentionArgs& a) const override {
    HAP_RETURN_IF_ERROR(CheckDevice(a.out, sizeof(float) * a.n_heads * a.n_text * a.n_vis,
                                    "TextVisualAttention", "out"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::TextVisualAttention(a, c->stream()));
  }
  // One launch: the last of a head's blocks makes its PAQ (cuda::TextVisualAttentionPaq).
  absl::Status TextVisualAttentionPaq(const TextVisualAttentionArgs& a, float* paq) const override {
    if (a.n_heads > ThreadContext::kMaxCountedHeads || !a.renormalize || a.row_entropy == nullptr) {
      return PruningKernels::TextVisualAttentionPaq(a, paq);
    }
    HAP_RETURN_IF_ERROR(CheckDevice(a.out, sizeof(float) * a.n_heads * a.n_text * a.n_vis,
                                    "TextVisualAttentionPaq", "out"));
    HAP_RETURN_IF_ERROR(CheckDevice(a.row_entropy, sizeof(double) * a.n_heads * a.n_text,
                                    "TextVisualAttentionPaq", "row_entropy"));
    HAP_RETURN_IF_ERROR(
        CheckDevice(paq, sizeof(float) * a.n_heads, "TextVisualAttentionPaq", "paq"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    HAP_ASSIGN_OR_RETURN(unsigned* counters, c->HeadCounters());
    return ToStatus(cuda::TextVisualAttentionPaq(a, paq, counters, c->stream()));
  }
  // The PAQ values stay on the device: a map that is not a distribution gets NaN there
  // (kernels/cuda/paq.h), which the caller finds when it copies the values out.
  absl::Status Paq(const float* maps, int n_maps, int n_text, int n_vis,
                   float* paq) const override {
    HAP_RETURN_IF_ERROR(CheckDevice(maps, sizeof(float) * n_maps * n_text * n_vis, "Paq", "maps"));
    HAP_RETURN_IF_ERROR(CheckDevice(paq, sizeof(float) * n_maps, "Paq", "paq"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::Paq(maps, n_maps, n_text, n_vis, paq, c->stream()));
  }
  absl::Status PaqFromRowEntropies(const float* maps, const double* row_entropy, int n_maps,
                                   int n_text, int n_vis, float* paq) const override {
    HAP_RETURN_IF_ERROR(
        CheckDevice(maps, sizeof(float) * n_maps * n_text * n_vis, "PaqFromRowEntropies", "maps"));
    HAP_RETURN_IF_ERROR(CheckDevice(row_entropy, sizeof(double) * n_maps * n_text,
                                    "PaqFromRowEntropies", "row_entropy"));
    HAP_RETURN_IF_ERROR(CheckDevice(paq, sizeof(float) * n_maps, "PaqFromRowEntropies", "paq"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(
        cuda::PaqFromRowEntropies(maps, row_entropy, n_maps, n_text, n_vis, paq, c->stream()));
  }
  absl::Status PaqSoftmaxWeights(const float* paq, int n, double temperature,
                                 float* weights) const override {
    HAP_RETURN_IF_ERROR(CheckDevice(paq, sizeof(float) * n, "PaqSoftmaxWeights", "paq"));
    HAP_RETURN_IF_ERROR(CheckDevice(weights, sizeof(float) * n, "PaqSoftmaxWeights", "weights"));
    HAP_RETURN_IF_ERROR(CheckTemperature("PaqSoftmaxWeights", temperature));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::PaqSoftmaxWeights(paq, n, temperature, weights, c->stream()));
  }
  absl::Status WeightedSumMaps(const float* const* maps, const float* weights, int n_maps,
                               int64_t size, float* out) const override {
    for (int i = 0; i < n_maps; ++i) {
      HAP_RETURN_IF_ERROR(CheckDevice(maps[i], sizeof(float) * size, "WeightedSumMaps", "a map"));
    }
    HAP_RETURN_IF_ERROR(CheckDevice(weights, sizeof(float) * n_maps, "WeightedSumMaps", "weights"));
    HAP_RETURN_IF_ERROR(CheckDevice(out, sizeof(float) * size, "WeightedSumMaps", "out"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    HAP_ASSIGN_OR_RETURN(void* d_maps, c->ReserveAndUpload(maps, sizeof(float*) * n_maps));
    return ToStatus(cuda::WeightedSumMaps(static_cast<const float* const*>(d_maps), weights, n_maps,
                                          size, out, c->stream()));
  }
  absl::Status WeightedSumContiguous(const float* maps, const float* weights, int n_maps,
                                     int64_t size, float* out) const override {
    HAP_RETURN_IF_ERROR(
        CheckDevice(maps, sizeof(float) * n_maps * size, "WeightedSumContiguous", "maps"));
    HAP_RETURN_IF_ERROR(
        CheckDevice(weights, sizeof(float) * n_maps, "WeightedSumContiguous", "weights"));
    HAP_RETURN_IF_ERROR(CheckDevice(out, sizeof(float) * size, "WeightedSumContiguous", "out"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::WeightedSumContiguous(maps, weights, n_maps, size, out, c->stream()));
  }
  // One launch where the weights fit the kernel's shared memory; else the two ops.
  absl::Status PaqSoftmaxSumContiguous(const float* maps, const float* paq, int n_maps,
                                       double temperature, int64_t size, float* weights,
                                       float* out) const override {
    if (n_maps > cuda::kPaqSoftmaxSumMaxMaps) {
      return PruningKernels::PaqSoftmaxSumContiguous(maps, paq, n_maps, temperature, size, weights,
                                                     out);
    }
    const char* op = "PaqSoftmaxSumContiguous";
    HAP_RETURN_IF_ERROR(CheckDevice(maps, sizeof(float) * n_maps * size, op, "maps"));
    HAP_RETURN_IF_ERROR(CheckDevice(paq, sizeof(float) * n_maps, op, "paq"));
    HAP_RETURN_IF_ERROR(CheckDevice(weights, sizeof(float) * n_maps, op, "weights"));
    HAP_RETURN_IF_ERROR(CheckDevice(out, sizeof(float) * size, op, "out"));
    HAP_RETURN_IF_ERROR(CheckTemperature(op, temperature));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(
        cuda::PaqSoftmaxSum(maps, paq, n_maps, temperature, size, weights, out, c->stream()));
  }
  absl::Status TokenScores(const float* map, int64_t n_rows, int n_vis,
                           float* scores) const override {
    HAP_RETURN_IF_ERROR(CheckDevice(map, sizeof(float) * n_rows * n_vis, "TokenScores", "map"));
    HAP_RETURN_IF_ERROR(CheckDevice(scores, sizeof(float) * n_vis, "TokenScores", "scores"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::TokenScores(map, n_rows, n_vis, scores, c->stream()));
  }
  absl::Status TokenScoresOfRows(const float* map, int64_t n_rows, int n_vis, const int* rows,
                                 int n_sel, float* scores) const override {
    HAP_RETURN_IF_ERROR(
        CheckDevice(map, sizeof(float) * n_rows * n_vis, "TokenScoresOfRows", "map"));
    HAP_RETURN_IF_ERROR(CheckDevice(scores, sizeof(float) * n_vis, "TokenScoresOfRows", "scores"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    HAP_ASSIGN_OR_RETURN(void* d_rows, c->ReserveAndUpload(rows, sizeof(int) * n_sel));
    return ToStatus(cuda::TokenScoresOfRows(map, n_rows, n_vis, static_cast<const int*>(d_rows),
                                            n_sel, scores, c->stream()));
  }
  // The kept indices come back to the host: the one sync of a pruning stage.
  absl::Status StableTopK(const float* scores, int n, int k, int* kept) const override {
    HAP_RETURN_IF_ERROR(CheckDevice(scores, sizeof(float) * n, "StableTopK", "scores"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    HAP_ASSIGN_OR_RETURN(void* d_kept, c->ReserveAndTake(sizeof(int) * std::max(k, 1)));
    HAP_CUDA_RETURN_IF_ERROR(
        cuda::StableTopK(scores, n, k, static_cast<int*>(d_kept), c->stream()));
    HAP_RETURN_IF_ERROR(DeviceToHost(kept, d_kept, sizeof(int) * k));
    // The kernel marks a NaN score (which has no rank) by -1 in every slot.
    if (k > 0 && kept[0] < 0) {
      return absl::InvalidArgumentError("StableTopK: a score is NaN (a NaN has no rank)");
    }
    return absl::OkStatus();
  }
  absl::Status StableTopKToBackend(const float* scores, int n, int k,
                                   int32_t* kept) const override {
    HAP_RETURN_IF_ERROR(CheckDevice(scores, sizeof(float) * n, "StableTopKToBackend", "scores"));
    HAP_RETURN_IF_ERROR(CheckDevice(kept, sizeof(int32_t) * k, "StableTopKToBackend", "kept"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::StableTopK(scores, n, k, kept, c->stream()));
  }
  absl::Status TokenScoresTopKToBackend(const float* map, int64_t n_rows, int n_vis, int k,
                                        float* scores, int32_t* kept) const override {
    if (n_vis > cuda::kTokenScoresTopKMaxTokens || k < 1) {
      return PruningKernels::TokenScoresTopKToBackend(map, n_rows, n_vis, k, scores, kept);
    }
    const char* op = "TokenScoresTopKToBackend";
    HAP_RETURN_IF_ERROR(CheckDevice(map, sizeof(float) * n_rows * n_vis, op, "map"));
    HAP_RETURN_IF_ERROR(CheckDevice(scores, sizeof(float) * n_vis, op, "scores"));
    HAP_RETURN_IF_ERROR(CheckDevice(kept, sizeof(int32_t) * k, op, "kept"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::TokenScoresTopK(map, n_rows, n_vis, k, scores, kept, c->stream()));
  }
  absl::Status PaqTokenScoresTopKToBackend(const float* map, int n_rows, int n_vis, int k,
                                           float* paq, float* scores,
                                           int32_t* kept) const override {
    if (n_vis > cuda::kTokenScoresTopKMaxTokens || k < 1) {
      return PruningKernels::PaqTokenScoresTopKToBackend(map, n_rows, n_vis, k, paq, scores, kept);
    }
    const char* op = "PaqTokenScoresTopKToBackend";
    HAP_RETURN_IF_ERROR(CheckDevice(map, sizeof(float) * n_rows * n_vis, op, "map"));
    HAP_RETURN_IF_ERROR(CheckDevice(paq, sizeof(float), op, "paq"));
    HAP_RETURN_IF_ERROR(CheckDevice(scores, sizeof(float) * n_vis, op, "scores"));
    HAP_RETURN_IF_ERROR(CheckDevice(kept, sizeof(int32_t) * k, op, "kept"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::TokenScoresTopK(map, n_rows, n_vis, k, scores, kept, c->stream(), paq));
  }
  // One launch: the last block of the weighted sum scores and selects (cuda::
  // PaqSoftmaxSumScoresTopK), counted in the thread's first head counter.
  absl::Status PaqSoftmaxSumScoresTopKToBackend(const float* maps, const float* paq, int n_maps,
                                                double temperature, int n_text, int n_vis, int k,
                                                float* weights, float* out, float* map_paq,
                                                float* scores, int32_t* kept) const override {
    if (n_vis > cuda::kTokenScoresTopKMaxTokens || n_maps > cuda::kPaqSoftmaxSumMaxMaps || k < 1 ||
        n_text <= 0 || n_vis <= 0) {
      return PruningKernels::PaqSoftmaxSumScoresTopKToBackend(
          maps, paq, n_maps, temperature, n_text, n_vis, k, weights, out, map_paq, scores, kept);
    }
    const char* op = "PaqSoftmaxSumScoresTopKToBackend";
    const int64_t size = int64_t{n_text} * n_vis;
    HAP_RETURN_IF_ERROR(CheckDevice(maps, sizeof(float) * n_maps * size, op, "maps"));
    HAP_RETURN_IF_ERROR(CheckDevice(paq, sizeof(float) * n_maps, op, "paq"));
    HAP_RETURN_IF_ERROR(CheckDevice(weights, sizeof(float) * n_maps, op, "weights"));
    HAP_RETURN_IF_ERROR(CheckDevice(out, sizeof(float) * size, op, "out"));
    HAP_RETURN_IF_ERROR(CheckDevice(map_paq, sizeof(float), op, "map_paq"));
    HAP_RETURN_IF_ERROR(CheckDevice(scores, sizeof(float) * n_vis, op, "scores"));
    HAP_RETURN_IF_ERROR(CheckDevice(kept, sizeof(int32_t) * k, op, "kept"));
    HAP_RETURN_IF_ERROR(CheckTemperature(op, temperature));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    HAP_ASSIGN_OR_RETURN(unsigned* counters, c->HeadCounters());
    cuda::SumScoresArgs a;
    a.maps = maps;
    a.paq = paq;
    a.n_maps = n_maps;
    a.temperature = temperature;
    a.n_text = n_text;
    a.n_vis = n_vis;
    a.k = k;
    a.weights = weights;
    a.out = out;
    a.map_paq = map_paq;
    a.scores = scores;
    a.kept = kept;
    a.done = counters;
    return ToStatus(cuda::PaqSoftmaxSumScoresTopK(a, c->stream()));
  }
  // The token lists (host) are checked here and uploaded; the counts come back only when the
  // caller asks for them (the explain record).
  absl::Status VisionZipMerge(const VisionZipMergeArgs& a) const override {
    if (a.targets == nullptr || (a.n_sources > 0 && a.sources == nullptr) || a.n_tokens <= 0 ||
        a.n_heads <= 0 || a.head_dim <= 0 || a.d_model <= 0 || a.n_targets <= 0 ||
        a.n_sources < 0) {
      return absl::InvalidArgumentError("VisionZipMerge: null token list or non-positive size");
    }
    for (auto [idx, n, what] : {std::tuple{a.targets, a.n_targets, "targets"},
                                std::tuple{a.sources, a.n_sources, "sources"}}) {
      for (int i = 0; i < n; ++i) {
        if (idx[i] < 0 || idx[i] >= a.n_tokens) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "VisionZipMerge: %s[%d] = %d outside [0, %d)", what, i, idx[i], a.n_tokens));
        }
      }
    }
    const size_t tokens = static_cast<size_t>(a.n_tokens);
    HAP_RETURN_IF_ERROR(
        CheckDevice(a.k, sizeof(float) * tokens * a.n_heads * a.head_dim, "VisionZipMerge", "k"));
    HAP_RETURN_IF_ERROR(
        CheckDevice(a.hidden, sizeof(float) * tokens * a.d_model, "VisionZipMerge", "hidden"));
    HAP_RETURN_IF_ERROR(CheckDevice(a.out,
                                    sizeof(float) * static_cast<size_t>(a.n_targets) * a.d_model,
                                    "VisionZipMerge", "out"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    const size_t target_bytes = sizeof(int) * a.n_targets;
    const size_t source_bytes = sizeof(int) * a.n_sources;
    const size_t work_bytes =
        cuda::VisionZipMergeWorkspaceBytes(a.n_targets, a.n_sources, a.head_dim);
    HAP_RETURN_IF_ERROR(
        c->Reserve(ThreadContext::Padded(target_bytes) + ThreadContext::Padded(source_bytes) +
                   ThreadContext::Padded(work_bytes) + ThreadContext::Padded(target_bytes)));
    VisionZipMergeArgs d = a;
    HAP_ASSIGN_OR_RETURN(void* d_targets, c->Upload(a.targets, target_bytes));
    d.targets = static_cast<const int*>(d_targets);
    d.sources = nullptr;
    if (a.n_sources > 0) {
      HAP_ASSIGN_OR_RETURN(void* d_sources, c->Upload(a.sources, source_bytes));
      d.sources = static_cast<const int*>(d_sources);
    }
    HAP_ASSIGN_OR_RETURN(void* workspace, c->Take(work_bytes));
    d.merged_count = nullptr;
    if (a.merged_count != nullptr) {
      HAP_ASSIGN_OR_RETURN(void* d_counts, c->Take(target_bytes));
      d.merged_count = static_cast<int*>(d_counts);
    }
    HAP_CUDA_RETURN_IF_ERROR(cuda::VisionZipMerge(d, workspace, c->stream()));
    if (a.merged_count == nullptr) return absl::OkStatus();
    return DeviceToHost(a.merged_count, d.merged_count, target_bytes);
  }
};

// A planned step on the GPU (kernels/step.h): the backend's ops one by one, except that
//  - the rows an RmsNorm, a LayerNorm, a SiLU·up, a quick_gelu or a FlashAttention writes are
//    rounded to the weights' narrow type once, by that op itself (RmsNormRounded,
//    LayerNormRounded, SiluMulRounded, QuickGeluRounded, FlashAttention's rounded output, into the
//    plan's own workspace), for every product from narrow weights that reads them before they are
//    written again (q, k and v; gate and up; down; o; fc1; fc2), instead of by each product;
//  - consecutive such products whose weights lie back to back (PlacedWeights::Place puts a
//    layer's q, k, v and its gate, up so) run as one strided batched product, their biases added
//    after it: 7 products per LLaMA layer become 4, a CLIP layer's 6 become 4;
//  - a layer's two RoPEs (q and k, at the same positions) are one launch (RopePair);
//  - such a product followed by the residual add of its output adds itself to the sum as cuBLAS
//    writes it (beta 1), when nothing reads its own output value afterwards;
//  - a RoPE pair of q and k that a FlashAttention of the prefill's rows over each other reads
//    next goes into that attention (FlashAttentionRope): the products of q, k and v write into
//    the plan's workspace instead, and the attention rotates q and k as it loads them and leaves
//    the rotated q and k and a copy of v in their values, for the KV cache and the pruners.
// The same F32 rows, the same rounding and the same products as the op-by-op step (a batched
// product may sum in another order on a GPU, where cuBLAS picks its kernels by shape).
class CudaStep final : public PlannedStep {
 public:
  CudaStep(const Backend& backend, StepDesc d) : PlannedStep(std::move(d)), backend_(backend) {
    const std::vector<StepOp>& ops = desc().ops();
    fused_.resize(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      // A layer's q and k rotated at the same positions: one launch.
      const auto* rope = std::get_if<step_op::Rope>(&ops[i]);
      if (rope != nullptr && fused_[i].kind == Fused::kNone && i + 1 < ops.size()) {
        const auto* next = std::get_if<step_op::Rope>(&ops[i + 1]);
        if (next != nullptr && !rope->multi_axis() && !next->multi_axis() && next->x != rope->x &&
            next->positions == rope->positions && next->rows == rope->rows &&
            next->head_dim == rope->head_dim && next->theta == rope->theta) {
          fused_[i].kind = Fused::kRopePair;
          fused_[i + 1].kind = Fused::kSkip;
        }
        continue;
      }
      // An op whose output feeds products from narrow weights writes it rounded as well: an
      // RMSNorm (q, k, v; gate, up), SiLU·up (down) and FlashAttention (o).
      StepValueId value = kNoStepValue;
      int64_t rows = 0, width = 0;
      Fused::Kind kind = Fused::kNone;
      if (const auto* norm = std::get_if<step_op::RmsNorm>(&ops[i])) {
        value = norm->y, rows = norm->rows, width = norm->d, kind = Fused::kNormRounded;
      } else if (const auto* ln = std::get_if<step_op::LayerNorm>(&ops[i])) {
        value = ln->y, rows = ln->rows, width = ln->d, kind = Fused::kLayerNormRounded;
      } else if (const auto* act = std::get_if<step_op::Activate>(&ops[i])) {
        if (act->kind != Activation::kQuickGelu) continue;
        value = act->x, rows = -1, width = act->n, kind = Fused::kQuickGeluRounded;
      } else if (const auto* silu = std::get_if<step_op::SiluMul>(&ops[i])) {
        value = silu->gate, rows = -1, width = silu->n, kind = Fused::kSiluMulRounded;
      } else if (const auto* att = std::get_if<step_op::Attention>(&ops[i])) {
        if (att->shape.operands == DType::kF32 || !cuda::FlashAttentionSupports(att->shape)) {
          continue;
        }
        value = att->out, rows = att->shape.n_q;
        width = int64_t{att->shape.n_heads} * att->shape.head_dim;
        kind = Fused::kAttentionRounded;
      } else {
        continue;
      }
      std::vector<size_t> readers;
      DType type = DType::kF32;
      for (size_t j = i + 1; j < ops.size() && !MayWrite(ops[j], value); ++j) {
        const auto* product = std::get_if<step_op::Linear>(&ops[j]);
        if (product == nullptr || product->x != value) continue;
        // rows < 0: only the element count is known (SiLU·up's n = m · k).
        const bool shape = rows < 0 ? int64_t{product->m} * product->w.shape[1] == width
                                    : product->m == rows && product->w.shape[1] == width;
        if (!shape || product->w.dtype == DType::kF32 ||
            (type != DType::kF32 && product->w.dtype != type)) {
          continue;
        }
        type = product->w.dtype;
        readers.push_back(j);
      }
      if (readers.empty()) continue;
      const int64_t values = rows < 0 ? width : rows * width;
      const size_t offset = ReserveWorkspace(sizeof(uint16_t) * values);
      fused_[i] = {kind, type, offset};
      for (size_t r = 0; r < readers.size();) {
        // Readers in consecutive ops whose weights have one shape and lie a constant stride
        // apart (PlacedWeights places q, k, v and gate, up so), all with a bias or none, are one
        // batched product (each bias added after it).
        const auto& lead = std::get<step_op::Linear>(ops[readers[r]]);
        const int64_t stride = lead.w.numel();
        size_t g = 1;
        while (r + g < readers.size() && readers[r + g] == readers[r] + g) {
          const auto& next = std::get<step_op::Linear>(ops[readers[r + g]]);
          const auto* expected = static_cast<const char*>(lead.w.data) +
                                 static_cast<int64_t>(g) * stride * DTypeSize(lead.w.dtype);
          if ((next.bias == nullptr) != (lead.bias == nullptr) || next.w.shape != lead.w.shape ||
              next.w.dtype != lead.w.dtype || next.w.data != expected) {
            break;
          }
          ++g;
        }
        fused_[readers[r]] = {Fused::kProductOfRounded, type, offset, static_cast<int>(g), stride};
        for (size_t m = 1; m < g; ++m) {
          fused_[readers[r + m]] = {Fused::kBatchMember, type, offset};
        }
        r += g;
      }
    }
    // A product from rounded rows with a bias leaves the bias to the op after it when that op
    // reads its output only: a residual add (AddWithBias, CLIP's o and fc2, whose output nothing
    // reads afterwards) or a quick_gelu that rounds (CLIP's fc1). The same F32 sums, one launch
    // fewer each.
    for (size_t j = 0; j + 1 < ops.size(); ++j) {
      if (fused_[j].kind != Fused::kProductOfRounded || fused_[j].batch != 1) continue;
      const auto& product = std::get<step_op::Linear>(ops[j]);
      if (product.bias == nullptr) continue;
      const int64_t out = int64_t{product.m} * product.w.shape[0];
      if (const auto* act = std::get_if<step_op::Activate>(&ops[j + 1])) {
        if (act->x == product.y && act->n == out &&
            fused_[j + 1].kind == Fused::kQuickGeluRounded) {
          fused_[j].bias_to_next = true;
          fused_[j + 1].bias_from = static_cast<int>(j);
        }
        continue;
      }
      const auto* add = std::get_if<step_op::Add>(&ops[j + 1]);
      if (add == nullptr || add->x != product.y || add->y == product.y || add->n != out ||
          fused_[j + 1].kind != Fused::kNone || !Dead(ops, j + 2, product.y)) {
        continue;
      }
      fused_[j].bias_to_next = true;
      fused_[j + 1].kind = Fused::kAddWithBias;
      fused_[j + 1].bias_from = static_cast<int>(j);
    }
    // A product from rounded rows whose output only feeds the next op, a residual add (o into x,
    // down into x), adds itself to that sum as it is written (Gemm::LinearRoundedAccumulate):
    // the add's launch goes, and its output value is left unwritten, which nothing reads.
    for (size_t j = 0; j + 1 < ops.size(); ++j) {
      if (fused_[j].kind != Fused::kProductOfRounded || fused_[j].batch != 1) continue;
      const auto& product = std::get<step_op::Linear>(ops[j]);
      const auto* add = std::get_if<step_op::Add>(&ops[j + 1]);
      if (product.bias != nullptr || add == nullptr || add->x != product.y || add->y == product.y ||
          add->n != int64_t{product.m} * product.w.shape[0] || desc().values()[product.y].bound) {
        continue;
      }
      if (!Dead(ops, j + 2, product.y)) continue;
      fused_[j].accumulate_into = add->y;
      fused_[j + 1].kind = Fused::kSkip;
    }
    for (size_t i = 0; i + 2 < ops.size(); ++i) {
      if (fused_[i].kind == Fused::kRopePair) FuseRopeIntoAttention(i);
    }
  }

 private:
  struct Fused {
    enum Kind {
      kNone,
      kNormRounded,       // RmsNormRounded
      kLayerNormRounded,  // LayerNormRounded
      kQuickGeluRounded,  // QuickGeluRounded
      kSiluMulRounded,    // SiluMulRounded
      kAttentionRounded,  // FlashAttention with its output rounded too
      kProductOfRounded,  // a product that reads the rounded copy
      kBatchMember,       // run by the kProductOfRounded before it
      kRopePair,          // this Rope and the next one in one launch
      kAddWithBias,       // a residual add that adds the product before it's bias too
      kSkip,  // the second Rope of a pair; both, when the attention after them rotates q and k
    } kind = kNone;
    DType type = DType::kF32;  // the narrow type of the rounded rows
    size_t offset = 0;         // where they are in the workspace
    // kProductOfRounded: this product and the batch − 1 after it (kBatchMember, run here), whose
    // weights follow this one's w_stride elements apart.
    int batch = 1;
    int64_t w_stride = 0;
    // kProductOfRounded: the value the product is added to instead of written (the residual
    // add after it, then kSkip).
    StepValueId accumulate_into = kNoStepValue;
    // kProductOfRounded: its bias is left to the op after it, which names the product here.
    bool bias_to_next = false;
    int bias_from = -1;
    // kProductOfRounded, kBatchMember: the product's output goes to the plan's workspace at
    // this offset instead of to its value (the q, k or v FlashAttentionRope reads), or -1.
    int64_t y_at = -1;
    // An Attention that rotates q and k itself (FlashAttentionRope): the index of the RoPE pair
    // it took over, and where the products left q, k and v in the workspace.
    int rope_from = -1;
    size_t q_at = 0, k_at = 0, v_at = 0;
  };

  // The RoPE pair ops[i], ops[i + 1] (q and k) goes into the Attention ops[i + 2] when that is a
  // FlashAttention of the same rows over each other (n_kv = n_q, no causal offset) reading the
  // pair's q and k, and q, k and v were each written by a product from rounded rows (kept out of
  // the residual stream) that nothing but the pair and the attention reads. Those products then
  // write into three slots of the workspace, one apart in op order (a batched product's members
  // stay one stride apart), and the attention writes q, k and v.
  void FuseRopeIntoAttention(size_t i) {
    const std::vector<StepOp>& ops = desc().ops();
    const auto& rq = std::get<step_op::Rope>(ops[i]);
    const auto& rk = std::get<step_op::Rope>(ops[i + 1]);
    const auto* att = std::get_if<step_op::Attention>(&ops[i + 2]);
    if (att == nullptr ||
        (fused_[i + 2].kind != Fused::kNone && fused_[i + 2].kind != Fused::kAttentionRounded)) {
      return;
    }
    const AttentionArgs& shape = att->shape;
    if (att->q != rq.x || att->k != rk.x || att->v == rq.x || att->v == rk.x ||
        shape.operands == DType::kF32 || !cuda::FlashAttentionSupports(shape) ||
        shape.n_q != rq.rows || shape.n_kv != shape.n_q || shape.causal_offset != 0 ||
        rq.n_heads != shape.n_heads || rk.n_heads != shape.n_kv_heads ||
        rq.head_dim != shape.head_dim) {
      return;
    }
    std::vector<size_t> producers;  // of q, k and v
    for (StepValueId value : {att->q, att->k, att->v}) {
      size_t j = i;
      while (j > 0 && !MayWrite(ops[j - 1], value)) --j;
      if (j == 0) return;
      --j;
      const auto* product = std::get_if<step_op::Linear>(&ops[j]);
      const Fused& f = fused_[j];
      if (product == nullptr || product->y != value ||
          (f.kind != Fused::kProductOfRounded && f.kind != Fused::kBatchMember) ||
          f.accumulate_into != kNoStepValue || f.bias_to_next) {
        return;
      }
      for (size_t t = j + 1; t < i; ++t) {
        if (MayRead(ops[t], value)) return;
      }
      producers.push_back(j);
    }
    // A batch is redirected whole or not at all.
    for (size_t j : producers) {
      size_t lead = j;
      while (fused_[lead].kind == Fused::kBatchMember) --lead;
      for (int m = 0; m < fused_[lead].batch; ++m) {
        if (std::find(producers.begin(), producers.end(), lead + m) == producers.end()) return;
      }
    }
    int64_t slot = 0;  // floats, a multiple of 64 (slots 256 bytes apart)
    for (size_t j : producers) {
      const auto& product = std::get<step_op::Linear>(ops[j]);
      slot = std::max(slot, int64_t{product.m} * product.w.shape[0]);
    }
    slot = (slot + 63) / 64 * 64;
    const size_t base = ReserveWorkspace(sizeof(float) * slot * 3);
    std::vector<size_t> in_order = producers;
    std::sort(in_order.begin(), in_order.end());
    for (size_t n = 0; n < in_order.size(); ++n) {
      fused_[in_order[n]].y_at = static_cast<int64_t>(base + sizeof(float) * slot * n);
    }
    Fused& a = fused_[i + 2];
    a.rope_from = static_cast<int>(i);
    a.q_at = static_cast<size_t>(fused_[producers[0]].y_at);
    a.k_at = static_cast<size_t>(fused_[producers[1]].y_at);
    a.v_at = static_cast<size_t>(fused_[producers[2]].y_at);
    fused_[i].kind = Fused::kSkip;
  }

  // Whether value v is written again (or the step ends) from ops[from] on before anything reads
  // it: what it holds then is never read.
  static bool Dead(const std::vector<StepOp>& ops, size_t from, StepValueId v) {
    for (size_t t = from; t < ops.size(); ++t) {
      if (MayRead(ops[t], v)) return false;
      if (MayWrite(ops[t], v)) return true;
    }
    return true;
  }

  // Whether `op` may read value v (a Call that does not list what it reads may read anything).
  static bool MayRead(const StepOp& op, StepValueId v) {
    return std::visit(
        Overloaded{
            [&](const step_op::RmsNorm& o) { return o.x == v; },
            [&](const step_op::LayerNorm& o) { return o.x == v; },
            [&](const step_op::Activate& o) { return o.x == v; },
            [&](const step_op::Linear& o) { return o.x == v; },
            [&](const step_op::Rope& o) { return o.x == v || o.positions == v; },
            [&](const step_op::Attention& o) { return o.q == v || o.k == v || o.v == v; },
            [&](const step_op::Add& o) { return o.y == v || o.x == v; },
            [&](const step_op::SiluMul& o) { return o.gate == v || o.up == v; },
            [&](const step_op::Call& o) {
              return !o.listed || std::find(o.reads.begin(), o.reads.end(), v) != o.reads.end();
            },
        },
        op);
  }

  // Whether `op` may write value v (a Call may write anything).
  static bool MayWrite(const StepOp& op, StepValueId v) {
    return std::visit(Overloaded{
                          [&](const step_op::RmsNorm& o) { return o.y == v; },
                          [&](const step_op::LayerNorm& o) { return o.y == v; },
                          [&](const step_op::Activate& o) { return o.x == v; },
                          [&](const step_op::Linear& o) { return o.y == v; },
                          [&](const step_op::Rope& o) { return o.x == v; },
                          [&](const step_op::Attention& o) { return o.out == v || o.lse == v; },
                          [&](const step_op::Add& o) { return o.y == v; },
                          [&](const step_op::SiluMul& o) { return o.gate == v; },
                          [&](const step_op::Call&) { return true; },
                      },
                      op);
  }

  absl::Status RunOp(size_t index, const std::vector<void*>& p, void* workspace) const override {
    const Fused& f = fused_[index];
    const StepOp& op = desc().ops()[index];
    if (f.kind == Fused::kNone && f.rope_from < 0) return RunStepOp(backend_, op, p);
    // A batch's first product ran its members; a pair's first Rope, the second.
    if (f.kind == Fused::kBatchMember || f.kind == Fused::kSkip) return absl::OkStatus();
    void* rounded = static_cast<char*>(workspace) + f.offset;
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    auto f32 = [&](StepValueId v) { return static_cast<float*>(p[v]); };
    if (f.rope_from >= 0) return RunAttentionWithRope(f, op, p, workspace, rounded, c);
    if (f.kind == Fused::kRopePair) {
      const auto& o = std::get<step_op::Rope>(op);
      const auto& o2 = std::get<step_op::Rope>(desc().ops()[index + 1]);
      const auto* positions = static_cast<const int32_t*>(p[o.positions]);
      HAP_RETURN_IF_ERROR(CheckDevice(positions, sizeof(int32_t) * o.rows, "Rope", "positions"));
      HAP_RETURN_IF_ERROR(
          CheckDevice(f32(o.x), sizeof(float) * o.rows * o.n_heads * o.head_dim, "Rope", "x"));
      HAP_RETURN_IF_ERROR(
          CheckDevice(f32(o2.x), sizeof(float) * o.rows * o2.n_heads * o.head_dim, "Rope", "x"));
      return ToStatus(cuda::RopePair(f32(o.x), o.n_heads, f32(o2.x), o2.n_heads, positions, o.rows,
                                     o.head_dim, o.theta, c->stream()));
    }
    if (f.kind == Fused::kLayerNormRounded) {
      const auto& o = std::get<step_op::LayerNorm>(op);
      const size_t values = static_cast<size_t>(o.rows) * o.d;
      HAP_RETURN_IF_ERROR(CheckDevice(f32(o.x), sizeof(float) * values, "LayerNorm", "x"));
      HAP_RETURN_IF_ERROR(CheckDevice(f32(o.y), sizeof(float) * values, "LayerNorm", "y"));
      HAP_RETURN_IF_ERROR(CheckDevice(o.weight, sizeof(float) * o.d, "LayerNorm", "w"));
      HAP_RETURN_IF_ERROR(CheckDevice(o.bias, sizeof(float) * o.d, "LayerNorm", "b"));
      return ToStatus(cuda::LayerNormRounded(f32(o.x), o.weight, o.bias, f32(o.y), ElemOf(f.type),
                                             rounded, o.rows, o.d, o.eps, c->stream()));
    }
    // The bias a product before this op left to it, and its width.
    const float* bias = nullptr;
    int bias_cols = 0;
    if (f.bias_from >= 0) {
      const auto& product = std::get<step_op::Linear>(desc().ops()[f.bias_from]);
      bias = product.bias;
      bias_cols = static_cast<int>(product.w.shape[0]);
      HAP_RETURN_IF_ERROR(CheckDevice(bias, sizeof(float) * bias_cols, "Linear", "bias"));
    }
    if (f.kind == Fused::kQuickGeluRounded) {
      const auto& o = std::get<step_op::Activate>(op);
      HAP_RETURN_IF_ERROR(CheckDevice(f32(o.x), sizeof(float) * o.n, "Activate", "x"));
      return ToStatus(cuda::QuickGeluRounded(f32(o.x), o.n, ElemOf(f.type), rounded, c->stream(),
                                             bias, bias_cols));
    }
    if (f.kind == Fused::kAddWithBias) {
      const auto& o = std::get<step_op::Add>(op);
      HAP_RETURN_IF_ERROR(CheckDevice(f32(o.y), sizeof(float) * o.n, "Add", "y"));
      HAP_RETURN_IF_ERROR(CheckDevice(f32(o.x), sizeof(float) * o.n, "Add", "x"));
      return ToStatus(
          cuda::AddWithBias(f32(o.y), f32(o.x), bias, o.n / bias_cols, bias_cols, c->stream()));
    }
    if (f.kind == Fused::kSiluMulRounded) {
      const auto& o = std::get<step_op::SiluMul>(op);
      for (auto [ptr, what] : {std::pair{p[o.gate], "gate"}, {p[o.up], "up"}}) {
        HAP_RETURN_IF_ERROR(CheckDevice(ptr, sizeof(float) * o.n, "SiluMul", what));
      }
      return ToStatus(
          cuda::SiluMulRounded(f32(o.gate), f32(o.up), o.n, ElemOf(f.type), rounded, c->stream()));
    }
    if (f.kind == Fused::kAttentionRounded) {
      const AttentionArgs a = BoundAttention(std::get<step_op::Attention>(op), p);
      HAP_RETURN_IF_ERROR(CheckAttention(a));
      return ToStatus(
          cuda::FlashAttention(a, ElemOf(a.operands), c->stream(), rounded, ElemOf(f.type)));
    }
    if (f.kind == Fused::kNormRounded) {
      const auto& o = std::get<step_op::RmsNorm>(op);
      const size_t values = static_cast<size_t>(o.rows) * o.d;
      const auto* x = static_cast<const float*>(p[o.x]);
      auto* y = static_cast<float*>(p[o.y]);
      HAP_RETURN_IF_ERROR(CheckRmsNorm(x, o.weight, y, o.rows, o.d));
      HAP_RETURN_IF_ERROR(
          CheckDevice(rounded, sizeof(uint16_t) * values, "RmsNorm", "the rounded rows"));
      return ToStatus(cuda::RmsNormRounded(x, o.weight, y, ElemOf(f.type), rounded, o.rows, o.d,
                                           o.eps, c->stream()));
    }
    const auto& o = std::get<step_op::Linear>(op);
    const int n = static_cast<int>(o.w.shape[0]);
    const int k = static_cast<int>(o.w.shape[1]);
    // The batch's outputs: one product when they too lie a constant stride apart (the step's
    // scratch values of one size do), else one product each.
    // Where product index + b writes: its value, or its workspace slot (y_at).
    auto y_of = [&](int b) {
      const int64_t at = fused_[index + b].y_at;
      return at >= 0 ? reinterpret_cast<float*>(static_cast<char*>(workspace) + at)
                     : f32(std::get<step_op::Linear>(desc().ops()[index + b]).y);
    };
    bool batched = f.batch > 1;
    int64_t y_stride = 0;
    for (int b = 0; b < f.batch; ++b) {
      const auto& ob = std::get<step_op::Linear>(desc().ops()[index + b]);
      const float* yb = y_of(b);
      HAP_RETURN_IF_ERROR(CheckProduct(ob.w, ob.bias, yb, ob.m));
      const int64_t d = yb - y_of(0);
      if (b == 1) y_stride = d;
      if (b > 0) batched = batched && d == y_stride * b && y_stride >= int64_t{o.m} * n;
    }
    if (f.accumulate_into != kNoStepValue) {
      float* sum = f32(f.accumulate_into);
      HAP_RETURN_IF_ERROR(CheckProduct(o.w, nullptr, sum, o.m));
      return ToStatus(
          c->gemm().LinearRoundedAccumulate(rounded, o.w.data, ElemOf(f.type), sum, o.m, n, k));
    }
    if (batched) {
      HAP_RETURN_IF_ERROR(ToStatus(
          c->gemm().BatchedProduct(ElemOf(f.type), /*b_transposed=*/true, o.m, n, k, 1.f, rounded,
                                   k, 0, o.w.data, k, f.w_stride, y_of(0), n, y_stride, f.batch)));
      if (o.bias == nullptr) return absl::OkStatus();
      // The members' biases in one launch, up to kMaxBiasBatch at a time.
      for (int b0 = 0; b0 < f.batch; b0 += cuda::kMaxBiasBatch) {
        cuda::BiasBatch biases{};
        const int count = std::min(cuda::kMaxBiasBatch, f.batch - b0);
        for (int b = 0; b < count; ++b) {
          const auto& ob = std::get<step_op::Linear>(desc().ops()[index + b0 + b]);
          biases.y[b] = y_of(b0 + b);
          biases.bias[b] = ob.bias;
        }
        HAP_RETURN_IF_ERROR(ToStatus(cuda::AddBiases(biases, count, o.m, n, c->stream())));
      }
      return absl::OkStatus();
    }
    for (int b = 0; b < f.batch; ++b) {
      const auto& ob = std::get<step_op::Linear>(desc().ops()[index + b]);
      HAP_RETURN_IF_ERROR(ToStatus(c->gemm().LinearRounded(rounded, ob.w.data, ElemOf(f.type),
                                                           f.bias_to_next ? nullptr : ob.bias,
                                                           y_of(b), ob.m, n, k)));
    }
    return absl::OkStatus();
  }

  // An Attention that took over the RoPE pair before it (FuseRopeIntoAttention): q, k and v
  // from the workspace, the rotated q and k and v's copy into their values.
  absl::Status RunAttentionWithRope(const Fused& f, const StepOp& op, const std::vector<void*>& p,
                                    void* workspace, void* rounded, ThreadContext* c) const {
    const auto& att = std::get<step_op::Attention>(op);
    const auto& rq = std::get<step_op::Rope>(desc().ops()[f.rope_from]);
    AttentionArgs a = BoundAttention(att, p);
    cuda::FlashRopeArgs rope;
    rope.q_out = static_cast<float*>(p[att.q]);
    rope.k_out = static_cast<float*>(p[att.k]);
    rope.v_out = static_cast<float*>(p[att.v]);
    auto* w = static_cast<char*>(workspace);
    a.q = reinterpret_cast<const float*>(w + f.q_at);
    a.k = reinterpret_cast<const float*>(w + f.k_at);
    a.v = reinterpret_cast<const float*>(w + f.v_at);
    HAP_RETURN_IF_ERROR(CheckAttention(a));
    const size_t q_bytes = sizeof(float) * a.n_q * a.n_heads * a.head_dim;
    const size_t kv_bytes = sizeof(float) * a.n_kv * a.n_kv_heads * a.head_dim;
    HAP_RETURN_IF_ERROR(CheckDevice(rope.q_out, q_bytes, "Attention", "q"));
    HAP_RETURN_IF_ERROR(CheckDevice(rope.k_out, kv_bytes, "Attention", "k"));
    HAP_RETURN_IF_ERROR(CheckDevice(rope.v_out, kv_bytes, "Attention", "v"));
    rope.positions = static_cast<const int32_t*>(p[rq.positions]);
    HAP_RETURN_IF_ERROR(
        CheckDevice(rope.positions, sizeof(int32_t) * rq.rows, "Rope", "positions"));
    HAP_ASSIGN_OR_RETURN(const RopeTableView table, RopeTableFor(rq.theta, rq.head_dim, rq.rows));
    rope.cos_table = table.cos;
    rope.sin_table = table.sin;
    rope.table_positions = table.positions;
    rope.theta = rq.theta;
    const bool with_rounded = f.kind == Fused::kAttentionRounded;
    return ToStatus(cuda::FlashAttentionRope(
        a, rope, ElemOf(a.operands), c->stream(), with_rounded ? rounded : nullptr,
        with_rounded ? ElemOf(f.type) : cuda::ElemType::kBF16));
  }

  const Backend& backend_;
  std::vector<Fused> fused_;
};

// One array a GatherKeptRows compacts: src [n_tokens rows], dst [the rows kept].
struct KeptRowsArray {
  const void* src;
  const void* dst;
  size_t row_bytes;
};

// What GatherKeptRows and GatherKeptRowsPair check on the host: the counts, and each array and
// the kept list in device memory.
absl::Status CheckKeptRows(const char* op, std::initializer_list<KeptRowsArray> arrays,
                           int n_tokens, int n_vis, const int32_t* kept, int n_kept) {
  if (n_tokens < 0 || n_kept < 0 || n_kept > n_vis) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d of %d visual rows kept in %d", op, n_kept, n_vis, n_tokens));
  }
  const int64_t n_out = int64_t{n_tokens} - n_vis + n_kept;
  for (const KeptRowsArray& a : arrays) {
    HAP_RETURN_IF_ERROR(CheckDevice(a.src, a.row_bytes * n_tokens, op, "src"));
    HAP_RETURN_IF_ERROR(CheckDevice(a.dst, a.row_bytes * n_out, op, "dst"));
  }
  return CheckDevice(kept, sizeof(int32_t) * n_kept, op, "kept");
}

class CudaBackendImpl final : public Backend {
 public:
  Device device() const override { return Device::kCuda; }
  std::string_view name() const override { return "cuda"; }
  BackendCaps caps() const override {
    BackendCaps caps;
    caps.host_memory = false;
    caps.narrow_attention = true;
    caps.attention_run_align = cuda::kAttentionRunAlign;
    caps.graphs = true;
    caps.max_head_dim = std::min({cuda::kMaxAttentionHeadDim, cuda::kMaxDecodeHeadDim,
                                  cuda::kTextVisualAttentionMaxHeadDim});
    return caps;
  }
  const PruningKernels& pruning() const override { return pruning_; }
  absl::StatusOr<std::unique_ptr<BackendGraph>> Capture(
      const std::function<absl::Status()>& enqueue) const override {
    if (cuda::Capturing()) {
      return absl::FailedPreconditionError("Capture inside a capture on the same thread");
    }
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    HAP_CUDA_RETURN_IF_ERROR(cuda::BeginCapture(c->stream()));
    const absl::Status run = enqueue();
    cuda::Graph* graph = nullptr;
    const cuda::KernelStatus end = cuda::EndCapture(c->stream(), &graph);
    std::unique_ptr<BackendGraph> out(graph != nullptr ? new CudaGraph(graph, c) : nullptr);
    HAP_RETURN_IF_ERROR(run);
    HAP_CUDA_RETURN_IF_ERROR(end);
    if (out == nullptr) return absl::InvalidArgumentError("Capture: nothing was enqueued");
    return out;
  }
  absl::StatusOr<std::unique_ptr<PlannedStep>> Plan(StepDesc desc) const override {
    HAP_RETURN_IF_ERROR(CheckStep(desc));
    return std::unique_ptr<PlannedStep>(new CudaStep(*this, std::move(desc)));
  }

  // Through the block cache (kernels/cuda/block_cache.h): after a warm-up the request path
  // neither allocates nor frees device memory, and so never waits for the device to do so.
  absl::StatusOr<void*> Allocate(size_t bytes) const override {
    if (cuda::Capturing()) return NotWhileCapturing("an allocation");
    void* p = nullptr;
    HAP_CUDA_RETURN_IF_ERROR(cuda::BlockCache::Get().Allocate(&p, bytes));
    return p;
  }
  void Free(void* ptr) const override {
    if (cuda::IsShareable(ptr)) {
      cuda::FreeShareable(ptr);
      return;
    }
    cuda::BlockCache::Get().Free(ptr);
  }
  // Asked once: every KV handover asks, and a GPU's properties are slow to query.
  absl::StatusOr<std::string> DeviceIdentity() const override {
    static const absl::StatusOr<std::string> identity = []() -> absl::StatusOr<std::string> {
      std::string id;
      HAP_CUDA_RETURN_IF_ERROR(cuda::DeviceIdentity(&id));
      return id;
    }();
    return identity;
  }
  absl::StatusOr<void*> AllocateShareable(size_t bytes) const override {
    if (cuda::Capturing()) return NotWhileCapturing("an allocation");
    void* p = nullptr;
    HAP_CUDA_RETURN_IF_ERROR(cuda::AllocShareable(&p, bytes));
    return p;
  }
  absl::StatusOr<std::string> ExportMemory(const void* ptr) const override {
    std::string handle;
    HAP_CUDA_RETURN_IF_ERROR(cuda::IpcExport(ptr, &handle));
    return handle;
  }
  absl::StatusOr<void*> ImportMemory(const std::string& handle, size_t bytes) const override {
    void* p = nullptr;
    HAP_CUDA_RETURN_IF_ERROR(cuda::IpcOpen(handle, bytes, &p));
    return p;
  }
  absl::Status CloseImported(void* ptr) const override {
    HAP_CUDA_RETURN_IF_ERROR(cuda::IpcClose(ptr));
    return absl::OkStatus();
  }
  absl::StatusOr<void*> AllocateHost(size_t bytes) const override {
    void* p = nullptr;
    HAP_CUDA_RETURN_IF_ERROR(cuda::HostAlloc(&p, bytes));
    return p;
  }
  void FreeHost(void* ptr) const override { cuda::HostFree(ptr); }
  absl::Status CopyToBackend(void* dst, const void* src, size_t bytes) const override {
    if (cuda::Capturing() && !cuda::IsPinnedHostRange(src, bytes)) {
      return NotWhileCapturing("an upload from memory AllocateHost did not give");
    }
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::Copy(dst, src, bytes, cuda::CopyKind::kHostToDevice, c->stream()));
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) const override {
    return DeviceToHost(dst, src, bytes);
  }
  absl::Status CopyToHostAsync(void* dst, const void* src, size_t bytes) const override {
    if (cuda::Capturing() || !cuda::IsPinnedHostRange(dst, bytes)) {
      return DeviceToHost(dst, src, bytes);
    }
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::CopyToHostAsync(dst, src, bytes, c->stream()));
  }
  absl::Status Copy(void* dst, const void* src, size_t bytes) const override {
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::Copy(dst, src, bytes, cuda::CopyKind::kDeviceToDevice, c->stream()));
  }
  absl::Status Synchronize() const override {
    if (cuda::Capturing()) return NotWhileCapturing("a synchronisation");
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::Synchronize(c->stream()));
  }
  absl::StatusOr<TensorView> PlaceWeight(const TensorView& host,
                                         BackendBuffer* storage) const override {
    if (host.device == Device::kCuda) return host;
    HAP_ASSIGN_OR_RETURN(*storage, BackendBuffer::Allocate(*this, host.bytes()));
    if (host.contiguous()) {
      HAP_RETURN_IF_ERROR(CopyToBackend(storage->data(), host.data, host.bytes()));
    } else {  // a strided view is packed on the host and uploaded as one contiguous tensor
      std::vector<uint8_t> packed(static_cast<size_t>(host.bytes()));
      HAP_RETURN_IF_ERROR(CopyToContiguous(host, packed.data()));
      HAP_RETURN_IF_ERROR(CopyToBackend(storage->data(), packed.data(), packed.size()));
    }
    TensorView placed = host;
    placed.data = storage->data();
    placed.device = Device::kCuda;
    placed.strides.clear();
    return placed;
  }
  // What the process's allocations asked for and still hold: the block cache's size-class
  // rounding and the blocks it keeps for reuse are left out (block_cache.h).
  int64_t DeviceBytesInUse() const override {
    const cuda::BlockCache& cache = cuda::BlockCache::Get();
    return cuda::DeviceBytesInUse() - cache.HeldBytes() + cache.LiveBytes();
  }
  absl::Status StoreF32As(DType dtype, const float* src, void* dst, int64_t n) const override {
    HAP_RETURN_IF_ERROR(CheckDevice(src, sizeof(float) * n, "StoreF32As", "src"));
    HAP_RETURN_IF_ERROR(CheckDevice(dst, DTypeSize(dtype) * n, "StoreF32As", "dst"));
    if (dtype == DType::kF32) return Copy(dst, src, sizeof(float) * n);
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::RoundF32To(ElemOf(dtype), src, dst, n, c->stream()));
  }
  // F32: two copies (the copy engine's); rounded: one launch for both.
  absl::Status StoreF32PairAs(DType dtype, const float* a, void* a_dst, const float* b, void* b_dst,
                              int64_t n) const override {
    if (dtype == DType::kF32) return Backend::StoreF32PairAs(dtype, a, a_dst, b, b_dst, n);
    for (auto [src, dst] : {std::pair<const float*, void*>{a, a_dst}, {b, b_dst}}) {
      HAP_RETURN_IF_ERROR(CheckDevice(src, sizeof(float) * n, "StoreF32PairAs", "src"));
      HAP_RETURN_IF_ERROR(CheckDevice(dst, DTypeSize(dtype) * n, "StoreF32PairAs", "dst"));
    }
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::RoundF32PairTo(ElemOf(dtype), a, a_dst, b, b_dst, n, c->stream()));
  }

  absl::Status Embedding(const TensorView& table, const int32_t* ids, int n,
                         float* out) const override {
    HAP_RETURN_IF_ERROR(CheckWeight(table, "Embedding"));
    const int d = static_cast<int>(table.shape[1]);
    HAP_RETURN_IF_ERROR(CheckDevice(out, sizeof(float) * n * d, "Embedding", "out"));
    HAP_RETURN_IF_ERROR(CheckDevice(ids, sizeof(int32_t) * n, "Embedding", "ids"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::Embedding(table.data, ElemOf(table.dtype), ids, n, d, out, c->stream()));
  }

  absl::Status Linear(const float* x, const TensorView& w, const float* bias, float* y, int m,
                      LinearRows) const override {
    HAP_RETURN_IF_ERROR(CheckProduct(w, bias, y, m));
    const int n = static_cast<int>(w.shape[0]);
    const int k = static_cast<int>(w.shape[1]);
    HAP_RETURN_IF_ERROR(CheckDevice(x, sizeof(float) * m * k, "Linear", "x"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    // One product for every row count: cuBLAS's result for a row does not depend on the other
    // rows of the call only up to its own kernel choice, which the batching test bounds.
    return ToStatus(c->gemm().Linear(x, w.data, ElemOf(w.dtype), bias, y, m, n, k));
  }
  absl::Status RmsNorm(const float* x, const float* w, float* y, int rows, int d,
                       float eps) const override {
    HAP_RETURN_IF_ERROR(CheckRmsNorm(x, w, y, rows, d));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::RmsNorm(x, w, y, rows, d, eps, c->stream()));
  }
  absl::Status LayerNorm(const float* x, const float* w, const float* b, float* y, int rows,
                         int d, float eps) const override {
    HAP_RETURN_IF_ERROR(CheckDevice(x, sizeof(float) * rows * d, "LayerNorm", "x"));
    HAP_RETURN_IF_ERROR(CheckDevice(w, sizeof(float) * d, "LayerNorm", "w"));
    HAP_RETURN_IF_ERROR(CheckDevice(b, sizeof(float) * d, "LayerNorm", "b"));
    HAP_RETURN_IF_ERROR(CheckDevice(y, sizeof(float) * rows * d, "LayerNorm", "y"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::LayerNorm(x, w, b, y, rows, d, eps, c->stream()));
  }
  absl::Status Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
                    float theta) const override {
    HAP_RETURN_IF_ERROR(
        CheckDevice(x, sizeof(float) * rows * n_heads * head_dim, "Rope", "x"));
    HAP_RETURN_IF_ERROR(CheckDevice(positions, sizeof(int32_t) * rows, "Rope", "positions"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::Rope(x, positions, rows, n_heads, head_dim, theta, c->stream()));
  }
  absl::Status RopeAxes(const RopeAxesArgs& a) const override {
    if (const char* error = a.Error(); *error != 0) return absl::InvalidArgumentError(error);
    HAP_RETURN_IF_ERROR(
        CheckDevice(a.x, sizeof(float) * a.rows * a.n_heads * a.head_dim, "RopeAxes", "x"));
    HAP_RETURN_IF_ERROR(
        CheckDevice(a.positions, sizeof(int32_t) * a.rows * a.axes(), "RopeAxes", "positions"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::RopeAxes(a, c->stream()));
  }
  absl::Status Activate(Activation kind, float* x, int64_t n) const override {
    HAP_RETURN_IF_ERROR(CheckDevice(x, sizeof(float) * n, "Activate", "x"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    const cuda::ActivationKind k = kind == Activation::kQuickGelu ? cuda::ActivationKind::kQuickGelu
                                   : kind == Activation::kGelu    ? cuda::ActivationKind::kGelu
                                                                  : cuda::ActivationKind::kGeluTanh;
    return ToStatus(cuda::Activate(k, x, n, c->stream()));
  }
  absl::Status SiluMul(float* gate, const float* up, int64_t n) const override {
    HAP_RETURN_IF_ERROR(CheckDevice(gate, sizeof(float) * n, "SiluMul", "gate"));
    HAP_RETURN_IF_ERROR(CheckDevice(up, sizeof(float) * n, "SiluMul", "up"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::SiluMul(gate, up, n, c->stream()));
  }
  absl::Status Add(float* y, const float* x, int64_t n) const override {
    HAP_RETURN_IF_ERROR(CheckDevice(y, sizeof(float) * n, "Add", "y"));
    HAP_RETURN_IF_ERROR(CheckDevice(x, sizeof(float) * n, "Add", "x"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::Add(y, x, n, c->stream()));
  }
  absl::Status Attention(const AttentionArgs& a) const override {
    HAP_RETURN_IF_ERROR(CheckAttention(a));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    if (a.operands == DType::kF32) return ToStatus(cuda::Attention(a, c->stream()));
    if (cuda::FlashAttentionSupports(a)) {
      return ToStatus(cuda::FlashAttention(a, ElemOf(a.operands), c->stream()));
    }
    // Another head_dim: cuBLAS around a softmax kernel. The scratch grows to the largest shape seen
    // and is then reused: no allocation per call.
    HAP_ASSIGN_OR_RETURN(void* workspace,
                         c->ReserveAndTake(std::max<size_t>(1, cuda::NarrowAttentionWorkspaceBytes(a))));
    return ToStatus(cuda::NarrowAttention(a, ElemOf(a.operands), c->gemm(), workspace));
  }
  absl::Status DecodeAttention(const DecodeAttentionArgs& a) const override {
    const size_t q_bytes = sizeof(float) * a.n_seqs * a.n_heads * a.head_dim;
    if (a.tables_in_backend) {
      // The step's tables are already here; the kernel checks the shape.
      HAP_RETURN_IF_ERROR(
          CheckDevice(a.spans, sizeof(KvSpan) * a.n_spans, "DecodeAttention", "spans"));
      if (a.span_begin != nullptr) {
        HAP_RETURN_IF_ERROR(CheckDevice(a.span_begin, sizeof(int) * (a.n_seqs + 1),
                                        "DecodeAttention", "span_begin"));
      }
      HAP_RETURN_IF_ERROR(CheckDevice(a.q, q_bytes, "DecodeAttention", "q"));
      HAP_RETURN_IF_ERROR(CheckDevice(a.out, q_bytes, "DecodeAttention", "out"));
      HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
      // The slices' partial results in the caller's workspace, or in the scratch, which grows
      // to the largest step seen.
      const size_t part_bytes = cuda::DecodeAttentionPartBytes(a);
      void* parts = nullptr;
      if (part_bytes > 0 && a.workspace != nullptr) {
        HAP_RETURN_IF_ERROR(CheckDecodeWorkspace(a, part_bytes));
        parts = a.workspace;
      } else if (part_bytes > 0) {
        HAP_ASSIGN_OR_RETURN(parts, c->ReserveAndTake(part_bytes));
      }
      return ToStatus(cuda::DecodeAttention(a, parts, c->stream()));
    }
    HAP_RETURN_IF_ERROR(ValidateDecodeAttention(a));
    const size_t row_bytes =
        DTypeSize(a.kv_dtype) * static_cast<size_t>(a.n_kv_heads) * a.head_dim;
    for (int s = 0; s < a.n_spans; ++s) {
      HAP_RETURN_IF_ERROR(CheckDevice(a.spans[s].k, row_bytes * a.spans[s].rows,
                                      "DecodeAttention", "a span's keys"));
      HAP_RETURN_IF_ERROR(CheckDevice(a.spans[s].v, row_bytes * a.spans[s].rows,
                                      "DecodeAttention", "a span's values"));
    }
    HAP_RETURN_IF_ERROR(CheckDevice(a.q, q_bytes, "DecodeAttention", "q"));
    HAP_RETURN_IF_ERROR(CheckDevice(a.out, q_bytes, "DecodeAttention", "out"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    // The span table (and a batch's span_begin) are host memory here; the kernel reads them from
    // the device: one upload area for both and the slices' partial results.
    const size_t table_bytes = sizeof(KvSpan) * a.n_spans;
    const size_t begin_bytes = a.span_begin != nullptr ? sizeof(int) * (a.n_seqs + 1) : 0;
    DecodeAttentionArgs device_args = a;
    if (device_args.max_rows <= 0) {
      for (int i = 0; i < a.n_seqs; ++i) {
        const int first = a.span_begin != nullptr ? a.span_begin[i] : 0;
        const int last = a.span_begin != nullptr ? a.span_begin[i + 1] : a.n_spans;
        int rows = 0;
        for (int s = first; s < last; ++s) rows += std::max(a.spans[s].rows, 0);
        device_args.max_rows = std::max(device_args.max_rows, rows);
      }
    }
    const size_t part_bytes = cuda::DecodeAttentionPartBytes(device_args);
    const bool own_parts = part_bytes > 0 && a.workspace != nullptr;
    if (own_parts) HAP_RETURN_IF_ERROR(CheckDecodeWorkspace(device_args, part_bytes));
    HAP_RETURN_IF_ERROR(c->Reserve(ThreadContext::Padded(table_bytes) +
                                   ThreadContext::Padded(begin_bytes) +
                                   (own_parts ? 0 : part_bytes)));
    HAP_ASSIGN_OR_RETURN(void* d_spans, c->Upload(a.spans, table_bytes));
    device_args.spans = static_cast<const KvSpan*>(d_spans);
    if (a.span_begin != nullptr) {
      HAP_ASSIGN_OR_RETURN(void* d_begin, c->Upload(a.span_begin, begin_bytes));
      device_args.span_begin = static_cast<const int*>(d_begin);
    }
    void* parts = own_parts ? a.workspace : nullptr;
    if (part_bytes > 0 && !own_parts) {
      HAP_ASSIGN_OR_RETURN(parts, c->Take(part_bytes));
    }
    return ToStatus(cuda::DecodeAttention(device_args, parts, c->stream()));
  }
  size_t DecodeAttentionWorkspaceBytes(const DecodeAttentionArgs& a) const override {
    return cuda::DecodeAttentionPartBytes(a);
  }
  absl::Status StoreKvRows(const StoreKvRowsArgs& a) const override {
    if (a.dtype != DType::kF32 && a.dtype != DType::kBF16) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "StoreKvRows: KV rows of %s (F32 or BF16 are stored)", std::string(DTypeName(a.dtype))));
    }
    if (a.n < 0 || a.kv_dim <= 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("StoreKvRows: %d rows of %d values", a.n, a.kv_dim));
    }
    if (a.n == 0) return absl::OkStatus();
    const size_t row_bytes = sizeof(float) * static_cast<size_t>(a.n) * a.kv_dim;
    HAP_RETURN_IF_ERROR(CheckDevice(a.k, row_bytes, "StoreKvRows", "k"));
    HAP_RETURN_IF_ERROR(CheckDevice(a.v, row_bytes, "StoreKvRows", "v"));
    HAP_RETURN_IF_ERROR(CheckDevice(a.k_dst, sizeof(void*) * a.n, "StoreKvRows", "k_dst"));
    HAP_RETURN_IF_ERROR(CheckDevice(a.v_dst, sizeof(void*) * a.n, "StoreKvRows", "v_dst"));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(
        cuda::StoreRowsAs(ElemOf(a.dtype), a.k, a.v, a.k_dst, a.v_dst, a.n, a.kv_dim, c->stream()));
  }
  absl::Status GatherRows(const void* src, int64_t n_rows, size_t row_bytes, const int* idx,
                          int64_t n_idx, void* dst) const override {
    for (int64_t i = 0; i < n_idx; ++i) {
      if (idx[i] < 0 || idx[i] >= n_rows) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "GatherRows: index %d = %d outside [0, %d)", i, idx[i], n_rows));
      }
    }
    HAP_RETURN_IF_ERROR(CheckDevice(src, row_bytes * n_rows, "GatherRows", "src"));
    HAP_RETURN_IF_ERROR(CheckDevice(dst, row_bytes * n_idx, "GatherRows", "dst"));
    if (n_idx == 0) return absl::OkStatus();
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    const size_t idx_bytes = sizeof(int) * n_idx;
    const size_t out_bytes = row_bytes * n_idx;
    // In place (compaction) gathers into scratch first: a parallel in-place gather races.
    const bool in_place = src == dst;
    HAP_RETURN_IF_ERROR(c->Reserve(ThreadContext::Padded(idx_bytes) +
                                   (in_place ? ThreadContext::Padded(out_bytes) : 0)));
    HAP_ASSIGN_OR_RETURN(void* d_idx, c->Upload(idx, idx_bytes));
    void* out = dst;
    if (in_place) {
      HAP_ASSIGN_OR_RETURN(out, c->Take(out_bytes));
    }
    HAP_CUDA_RETURN_IF_ERROR(cuda::GatherRows(src, row_bytes, static_cast<const int*>(d_idx),
                                              n_idx, out, c->stream()));
    if (!in_place) return absl::OkStatus();
    return ToStatus(cuda::Copy(dst, out, out_bytes, cuda::CopyKind::kDeviceToDevice, c->stream()));
  }

  absl::Status GatherKeptRows(const void* src, int n_tokens, size_t row_bytes, int vis_begin,
                              int n_vis, const int32_t* kept, int n_kept,
                              void* dst) const override {
    HAP_RETURN_IF_ERROR(
        CheckKeptRows("GatherKeptRows", {{src, dst, row_bytes}}, n_tokens, n_vis, kept, n_kept));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::GatherKeptRows(src, n_tokens, row_bytes, vis_begin, n_vis, kept, n_kept,
                                         dst, c->stream()));
  }

  absl::Status GatherKeptRowsPair(const void* a_src, size_t a_row_bytes, void* a_dst,
                                  const void* b_src, size_t b_row_bytes, void* b_dst, int n_tokens,
                                  int vis_begin, int n_vis, const int32_t* kept,
                                  int n_kept) const override {
    HAP_RETURN_IF_ERROR(CheckKeptRows("GatherKeptRowsPair",
                                      {{a_src, a_dst, a_row_bytes}, {b_src, b_dst, b_row_bytes}},
                                      n_tokens, n_vis, kept, n_kept));
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    return ToStatus(cuda::GatherKeptRowsPair(a_src, a_row_bytes, a_dst, b_src, b_row_bytes, b_dst,
                                             n_tokens, vis_begin, n_vis, kept, n_kept,
                                             c->stream()));
  }

  // Greedy decoding: one id per row comes back (the step's one sync), not the row.
  absl::Status ArgMaxRows(const float* logits, int rows, int n, int32_t* ids) const override {
    if (ids == nullptr || rows < 0 || n <= 0) {
      return absl::InvalidArgumentError("ArgMaxRows: null ids or bad shape");
    }
    HAP_RETURN_IF_ERROR(
        CheckDevice(logits, sizeof(float) * static_cast<size_t>(rows) * n, "ArgMaxRows", "logits"));
    if (rows == 0) return absl::OkStatus();
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    HAP_ASSIGN_OR_RETURN(void* d_ids, c->ReserveAndTake(sizeof(int32_t) * rows));
    HAP_CUDA_RETURN_IF_ERROR(
        cuda::ArgMaxRows(logits, rows, n, static_cast<int*>(d_ids), c->stream()));
    return CopyToHost(ids, d_ids, sizeof(int32_t) * rows);
  }
  // Top-k / top-p decoding: each row's candidates and softmax denominator come back in one copy
  // (the step's one sync): values F32 [rows, k], ids I32 [rows, k], sums F64 [rows], back to back.
  absl::Status TopLogits(const TopLogitsArgs& a) const override {
    if (a.values == nullptr || a.ids == nullptr || a.rows < 0 || a.n <= 0 || a.k < 1 ||
        a.k > std::min(a.n, kMaxTopLogits) || (a.temperature != nullptr && a.row_sum == nullptr)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "TopLogits: null pointer or bad shape (rows %d, n %d, k %d of at most %d)", a.rows, a.n,
          a.k, kMaxTopLogits));
    }
    HAP_RETURN_IF_ERROR(CheckDevice(a.logits, sizeof(float) * static_cast<size_t>(a.rows) * a.n,
                                    "TopLogits", "logits"));
    if (a.rows == 0) return absl::OkStatus();
    HAP_ASSIGN_OR_RETURN(ThreadContext * c, Context());
    const size_t pairs = static_cast<size_t>(a.rows) * a.k;
    const size_t out_bytes = 2 * sizeof(float) * pairs + sizeof(double) * a.rows;  // F64 aligned
    const size_t temp_bytes = a.temperature != nullptr ? sizeof(float) * a.rows : 0;
    HAP_RETURN_IF_ERROR(c->Reserve(ThreadContext::Padded(out_bytes) +
                                   ThreadContext::Padded(temp_bytes)));
    HAP_ASSIGN_OR_RETURN(void* d_out, c->Take(out_bytes));
    const float* d_temp = nullptr;
    if (a.temperature != nullptr) {
      HAP_ASSIGN_OR_RETURN(void* t, c->Upload(a.temperature, temp_bytes));
      d_temp = static_cast<const float*>(t);
    }
    char* base = static_cast<char*>(d_out);
    float* d_values = reinterpret_cast<float*>(base);
    int* d_ids = reinterpret_cast<int*>(base + sizeof(float) * pairs);
    double* d_sums = reinterpret_cast<double*>(base + 2 * sizeof(float) * pairs);
    HAP_CUDA_RETURN_IF_ERROR(cuda::TopLogits(a.logits, a.rows, a.n, a.k, d_temp, d_values, d_ids,
                                             d_temp != nullptr ? d_sums : nullptr, c->stream()));
    const size_t copied = d_temp != nullptr ? out_bytes : 2 * sizeof(float) * pairs;
    std::vector<char> host(copied);
    HAP_RETURN_IF_ERROR(CopyToHost(host.data(), d_out, copied));
    std::memcpy(a.values, host.data(), sizeof(float) * pairs);
    std::memcpy(a.ids, host.data() + sizeof(float) * pairs, sizeof(int32_t) * pairs);
    if (d_temp != nullptr) {
      std::memcpy(a.row_sum, host.data() + 2 * sizeof(float) * pairs, sizeof(double) * a.rows);
    }
    return absl::OkStatus();
  }

 private:
  CudaPruning pruning_;
};

}  // namespace

absl::StatusOr<const Backend*> GetCudaBackend() {
  char name[256];
  int64_t total = 0;
  const KernelStatus s = cuda::DeviceDescription(name, sizeof name, &total);
  if (!s.ok) return absl::FailedPreconditionError("no usable CUDA device: " + s.message);
  static const Backend* backend = new CudaBackendImpl();
  return backend;
}

}  // namespace hap
