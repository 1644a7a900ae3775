// The backend interface: every op the model runs, behind one virtual table, so that the model code
// (runtime/model, runtime/prune) names no kernel of its own and each device (the CPU, CUDA) slots
// in beside the others. docs/design.md §6. Three parts: the general ops below; the pruning
// methods' scoring and selection behind pruning() (kernels/pruning_kernels.h); and planned steps
// (Plan, kernels/step.h), sequences of the general ops the engine describes once and the backend
// may fuse, give a workspace and capture. caps() says what the backend can do.
//
// Memory. Unless a comment says "host", a pointer is in the backend's memory (host memory for
// the CPU backend; device memory for a GPU backend) and the op is ordered after earlier ops on
// the same backend (a GPU backend runs them on one stream per calling thread). Weights arrive
// as TensorViews whose device names where they live. Results that decide control flow on the
// host are host pointers, and are the only points inside the ops where a GPU backend waits for
// its stream: StableTopK's kept indices (a pruning stage decided on the host; the engine's HAP
// prefill uses StableTopKToBackend and GatherKeptRows instead, which wait for nothing), the
// sampling ops' token ids
// and candidates (once per decode step), VisionZipMerge's optional counts. PAQ values and
// PAQ-softmax weights stay in the backend's memory (the caller copies out what it reports when
// it next waits anyway). docs/design.md §6 lists every device→host copy of a prefill and a step.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "kernels/op_args.h"
#include "kernels/pruning_kernels.h"
#include "kernels/step.h"

namespace hap {

// What a backend can do, for callers that choose a path or refuse early with a clear error.
struct BackendCaps {
  // The ops read and write host memory: a result can be read where it is, with no copy and no
  // wait (the CPU backend). Otherwise results come back through CopyToHost or a host-pointer
  // op, and host-side work such as sampling is better sent to the backend as ops.
  bool host_memory = false;
  // The largest head_dim the attention ops (prefill, decode, text→visual rows) take; a model
  // with wider heads is refused when it is loaded, naming the field and this limit.
  int max_head_dim = INT_MAX;
  // Attention with BF16/F16 operands (AttentionArgs::operands) is this backend's fast path
  // (tensor cores): a model of narrow weights computes its prefill attention that way unless
  // told otherwise (ModelOptions::attention_dtype).
  bool narrow_attention = false;
  // Where the runs of a variable-length attention (AttentionArgs::segment_bounds) start at
  // multiples of this, each run's rows get the arithmetic they get in an attention of their own
  // (the attention kernels' row and key tiles); a batched prefill lays its prompts out so.
  // 1: any start does (the CPU backend cuts its row blocks at the runs).
  int attention_run_align = 1;
  // Capture records ops and a BackendGraph replays them (a GPU's CUDA graphs); false where ops
  // run as they are called (the CPU backend, whose Capture is Unimplemented).
  bool graphs = false;
};

// Ops recorded by Backend::Capture, enqueued again as one unit.
class BackendGraph {
 public:
  virtual ~BackendGraph() = default;
  // Enqueues the recorded ops once more on the calling thread's stream, on whatever their inputs
  // hold by then (an upload reads its page-locked source then too). On the thread that captured
  // them: the ops may use scratch memory of that thread's, so a replay from another thread, or
  // once an op there needed more scratch and moved it, is FailedPrecondition (capture again).
  virtual absl::Status Replay() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string_view name() const = 0;
  virtual BackendCaps caps() const = 0;

  // --- Memory ---
  // `bytes` of this backend's memory (host memory for the CPU backend), at least 64-byte
  // aligned; ResourceExhausted when the device has no room. Free takes what Allocate gave.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) const = 0;
  virtual void Free(void* ptr) const = 0;
  // Copies in, out and within the backend's memory, ordered after the ops before them on the
  // calling thread; CopyToHost returns once the bytes are in host memory (a GPU's sync point).
  virtual absl::Status CopyToBackend(void* dst, const void* host_src, size_t bytes) const = 0;
  virtual absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes) const = 0;
  // CopyToHost without the wait where `host_dst` is AllocateHost memory: the bytes are there once
  // the calling thread's next Synchronize or CopyToHost returns (the KV transfer reads the next
  // chunk's rows so while the caller sends the last). Otherwise (and on the CPU) CopyToHost.
  virtual absl::Status CopyToHostAsync(void* host_dst, const void* src, size_t bytes) const {
    return CopyToHost(host_dst, src, bytes);
  }
  virtual absl::Status Copy(void* dst, const void* src, size_t bytes) const = 0;
  // Waits until the ops issued by the calling thread have finished (their errors surface here).
  virtual absl::Status Synchronize() const = 0;
  // `bytes` of host memory (64-byte aligned) that CopyToBackend reads without staging it first:
  // page-locked memory on a GPU, where such a copy returns at once and runs in order on the
  // stream, so the caller must not rewrite the bytes until the backend has waited past the copy
  // (a later CopyToHost or Synchronize on the same thread). Ordinary memory on the CPU backend.
  // What a decode step packs its one upload in. FreeHost takes what AllocateHost gave.
  virtual absl::StatusOr<void*> AllocateHost(size_t bytes) const = 0;
  virtual void FreeHost(void* ptr) const = 0;
  // Memory another process on the same device maps (a KV cache handed from the prefill process
  // to the decode process on one node without a copy through the host; kernels/cuda/ipc.h).
  // Unimplemented where memory is not shared (the CPU backend).
  // The device computed on: the same string in two processes exactly when they share it (a GPU's
  // UUID).
  virtual absl::StatusOr<std::string> DeviceIdentity() const {
    return absl::UnimplementedError(std::string(name()) +
                                    " memory is not shared between processes");
  }
  // `bytes` of this backend's memory that ExportMemory can share, freed with Free.
  virtual absl::StatusOr<void*> AllocateShareable(size_t bytes) const {
    (void)bytes;
    return DeviceIdentity().status();
  }
  // A handle of an AllocateShareable block (its start) for ImportMemory in another process. The
  // block must stay allocated until that process has closed what it imported.
  virtual absl::StatusOr<std::string> ExportMemory(const void* ptr) const {
    (void)ptr;
    return DeviceIdentity().status();
  }
  // The memory of another process's handle mapped into this one (at least `bytes`) as this
  // backend's memory, until CloseImported (after the work reading it is done: synchronise first).
  virtual absl::StatusOr<void*> ImportMemory(const std::string& handle, size_t bytes) const {
    (void)handle;
    (void)bytes;
    return DeviceIdentity().status();
  }
  virtual absl::Status CloseImported(void* ptr) const {
    (void)ptr;
    return DeviceIdentity().status();
  }
  // A weight in this backend's memory, contiguous (what the ops take). The CPU backend returns a
  // contiguous `host` itself (weights stay mapped) and leaves `storage` empty; a GPU backend
  // uploads the bytes once into `storage`, which the caller keeps as long as the returned view
  // is used. A strided view (TensorView::Narrow of a column range) is packed into `storage` on
  // either.
  virtual absl::StatusOr<TensorView> PlaceWeight(const TensorView& host,
                                                 class BackendBuffer* storage) const = 0;
  // Bytes this backend holds in its own memory (device memory; 0 for the CPU backend, whose
  // buffers are the process's RSS).
  virtual int64_t DeviceBytesInUse() const = 0;

  // dst = src converted to `dtype` (F32: a copy; BF16/F16: rounded to nearest even), n values,
  // both in the backend's memory: how KV rows enter a BF16 block pool.
  virtual absl::Status StoreF32As(DType dtype, const float* src, void* dst, int64_t n) const = 0;
  // StoreF32As of a into a_dst and of b into b_dst (n values each): a prefill layer's K and V
  // rows into its cache, one launch on a GPU where they are rounded.
  virtual absl::Status StoreF32PairAs(DType dtype, const float* a, void* a_dst, const float* b,
                                      void* b_dst, int64_t n) const {
    const absl::Status s = StoreF32As(dtype, a, a_dst, n);
    return s.ok() ? StoreF32As(dtype, b, b_dst, n) : s;
  }

  // --- Ops on token ids ---
  // out[r, :] = table[ids[r], :] widened to F32; table [vocab, d] as stored; ids in the
  // backend's memory, each in [0, vocab) (checked by the caller before they went there).
  virtual absl::Status Embedding(const TensorView& table, const int32_t* ids, int n,
                                 float* out) const = 0;

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
  // Rotary over several position axes (M-RoPE, 2-D vision rotary; op_args.h RopeAxesArgs).
  virtual absl::Status RopeAxes(const RopeAxesArgs& args) const = 0;
  virtual absl::Status Activate(Activation kind, float* x, int64_t n) const = 0;
  // gate = silu(gate) · up
  virtual absl::Status SiluMul(float* gate, const float* up, int64_t n) const = 0;
  // y += x
  virtual absl::Status Add(float* y, const float* x, int64_t n) const = 0;
  // Prefill attention with each row's log-sum-exp (args.lse) for the pruning methods.
  virtual absl::Status Attention(const AttentionArgs& args) const = 0;
  // One query row over a cache held as spans (paged blocks or one contiguous run).
  virtual absl::Status DecodeAttention(const DecodeAttentionArgs& args) const = 0;
  // The backend memory DecodeAttention needs for `args` besides its inputs and outputs (a
  // device's partial results of a sequence's row slices; 0 on the CPU). Given as args.workspace,
  // the op takes none of its own, which a captured step needs (its buffers stay put).
  virtual size_t DecodeAttentionWorkspaceBytes(const DecodeAttentionArgs& args) const {
    (void)args;
    return 0;
  }
  // A decode step's new KV rows of one layer into their caches (StoreKvRowsArgs).
  virtual absl::Status StoreKvRows(const StoreKvRowsArgs& args) const = 0;
  // dst[i] = src[idx[i]] for rows of row_bytes bytes out of n_rows (idx: host, in range); dst
  // may be src when idx ascends — compaction of hidden states, position ids and KV rows after a
  // pruning stage.
  virtual absl::Status GatherRows(const void* src, int64_t n_rows, size_t row_bytes,
                                  const int* idx, int64_t n_idx, void* dst) const = 0;
  // The compaction after a pruning stage decided in the backend's memory (kernels/cpu/prune/
  // gather_rows.h GatherKeptRows): dst = the rows [0, vis_begin), the kept visual rows
  // vis_begin + kept[r] (r < n_kept), then the rows [vis_begin + n_vis, n_tokens), out of place.
  // kept is in the backend's memory, so a GPU backend neither waits nor uploads: it cannot check
  // the indices, and copies row vis_begin for one outside [0, n_vis) (the caller checks kept when
  // it copies it back); the CPU backend checks them (InvalidArgument).
  virtual absl::Status GatherKeptRows(const void* src, int n_tokens, size_t row_bytes,
                                      int vis_begin, int n_vis, const int32_t* kept, int n_kept,
                                      void* dst) const = 0;
  // GatherKeptRows of two arrays with the same rows and kept list (the hidden states and the
  // position ids after a stage), each row of its own width: one launch on a GPU.
  virtual absl::Status GatherKeptRowsPair(const void* a_src, size_t a_row_bytes, void* a_dst,
                                          const void* b_src, size_t b_row_bytes, void* b_dst,
                                          int n_tokens, int vis_begin, int n_vis,
                                          const int32_t* kept, int n_kept) const {
    const absl::Status s =
        GatherKeptRows(a_src, n_tokens, a_row_bytes, vis_begin, n_vis, kept, n_kept, a_dst);
    return s.ok()
               ? GatherKeptRows(b_src, n_tokens, b_row_bytes, vis_begin, n_vis, kept, n_kept, b_dst)
               : s;
  }

  // --- Pruning ops: scoring and selection of visual tokens (kernels/pruning_kernels.h) ---
  virtual const PruningKernels& pruning() const = 0;

  // --- Graphs ---
  // Records the ops `enqueue` issues on the calling thread without running them, to enqueue them
  // again as one unit (on a GPU a CUDA graph: one launch instead of one per op). Every argument
  // is fixed at capture — addresses, sizes, grids — so a replay suits a step whose buffers stay
  // put. While recording, what cannot be replayed fails the capture with FailedPrecondition: a
  // copy to the host or a synchronisation (a wait for the device), an allocation, an upload from
  // memory AllocateHost did not give, an op that uploads host arrays of its own. InvalidArgument
  // when `enqueue` issued no op; its own error as it is. Unimplemented on a backend that runs ops
  // as they are called (the CPU backend).
  virtual absl::StatusOr<std::unique_ptr<BackendGraph>> Capture(
      const std::function<absl::Status()>& enqueue) const {
    (void)enqueue;
    return absl::UnimplementedError("this backend runs ops as they are called: nothing to capture");
  }

  // --- Planned steps (kernels/step.h) ---
  // Checks `desc` and plans it: the default runs each op as this backend's op of the same name
  // (PlanOpByOp), which is what the CPU backend does; a device backend may override it to fuse
  // ops or capture runs of them between Calls. InvalidArgument naming the op and operand when
  // the description does not hold together.
  virtual absl::StatusOr<std::unique_ptr<PlannedStep>> Plan(StepDesc desc) const {
    return PlanOpByOp(*this, std::move(desc));
  }

  // --- Sampling ops (kernels/cpu/sampling.h): what a decode step's sampler needs of its rows
  // of logits F32 [rows, n], so that a device sends back that rather than the rows ---
  // ids: host [rows], std::max_element's choice in each row (the greedy token).
  virtual absl::Status ArgMaxRows(const float* logits, int rows, int n, int32_t* ids) const = 0;
  // args.temperature, values, ids and row_sum: host (kernels/op_args.h).
  virtual absl::Status TopLogits(const TopLogitsArgs& args) const = 0;
};

// A buffer in a backend's memory (or, from AllocateHost, host memory the backend copies from
// without staging), freed when it goes out of scope. Move-only.
class BackendBuffer {
 public:
  BackendBuffer() = default;
  static absl::StatusOr<BackendBuffer> Allocate(const Backend& backend, size_t bytes) {
    return Holding(backend, backend.Allocate(bytes), bytes, /*host=*/false);
  }
  // Backend::AllocateShareable memory: another process on the device can map it.
  static absl::StatusOr<BackendBuffer> AllocateShareable(const Backend& backend, size_t bytes) {
    return Holding(backend, backend.AllocateShareable(bytes), bytes, /*host=*/false);
  }
  // Host memory from Backend::AllocateHost (page-locked on a GPU), given back with FreeHost.
  static absl::StatusOr<BackendBuffer> AllocateHost(const Backend& backend, size_t bytes) {
    return Holding(backend, backend.AllocateHost(bytes), bytes, /*host=*/true);
  }
  ~BackendBuffer() { Reset(); }
  BackendBuffer(BackendBuffer&& o) noexcept
      : backend_(o.backend_),
        data_(std::exchange(o.data_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)),
        host_(o.host_) {}
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      backend_ = o.backend_;
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      host_ = o.host_;
    }
    return *this;
  }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  void Reset() {
    if (data_ != nullptr) host_ ? backend_->FreeHost(data_) : backend_->Free(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  const Backend* backend_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool host_ = false;  // from AllocateHost

  static absl::StatusOr<BackendBuffer> Holding(const Backend& backend, absl::StatusOr<void*> p,
                                               size_t bytes, bool host) {
    if (!p.ok()) return p.status();
    BackendBuffer b;
    b.backend_ = &backend;
    b.data_ = *p;
    b.bytes_ = bytes;
    b.host_ = host;
    return b;
  }
};

// A growable typed array in a backend's memory (activations, attention maps, scores): Resize
// keeps the allocation when it is large enough and does not preserve contents.
template <typename T>
class BackendArray {
 public:
  BackendArray();
  explicit BackendArray(const Backend& backend) : backend_(&backend) {}
  // Moves leave the source empty (no buffer, size and capacity 0) on the same backend.
  BackendArray(BackendArray&& o) noexcept
      : backend_(o.backend_), buffer_(std::move(o.buffer_)), size_(std::exchange(o.size_, 0)),
        capacity_(std::exchange(o.capacity_, 0)) {}
  BackendArray& operator=(BackendArray&& o) noexcept {
    if (this != &o) {
      backend_ = o.backend_;
      buffer_ = std::move(o.buffer_);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
    }
    return *this;
  }
  // Moves the array to `backend` (dropping its contents) unless it is there already.
  void Rebind(const Backend& backend) {
    if (&backend == backend_) return;
    buffer_.Reset();
    size_ = capacity_ = 0;
    backend_ = &backend;
  }
  absl::Status Resize(size_t n) {
    if (n > capacity_) {
      buffer_.Reset();
      absl::StatusOr<BackendBuffer> b = BackendBuffer::Allocate(*backend_, n * sizeof(T));
      if (!b.ok()) return b.status();
      buffer_ = std::move(*b);
      capacity_ = n;
    }
    size_ = n;
    return absl::OkStatus();
  }
  // Resize(host.size()) and the host values copied in.
  absl::Status Assign(const T* host, size_t n) {
    absl::Status s = Resize(n);
    if (!s.ok()) return s;
    return backend_->CopyToBackend(data(), host, n * sizeof(T));
  }
  absl::Status CopyTo(T* host) const { return backend_->CopyToHost(host, data(), size_ * sizeof(T)); }
  T* data() const { return buffer_.as<T>(); }
  size_t size() const { return size_; }
  const Backend& backend() const { return *backend_; }

 private:
  const Backend* backend_;
  BackendBuffer buffer_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// The CPU backend (kernels/cpu, kernels/cpu/prune): host memory, the default thread pool.
const Backend& CpuBackend();

template <typename T>
BackendArray<T>::BackendArray() : backend_(&CpuBackend()) {}

// Sizes the CPU backend's compute before its first op: pool threads (<= 0: all cores) and how
// long they spin for the next op before sleeping (ThreadPool).
void ConfigureCpuBackend(int n_threads, int spin_us);

}  // namespace hap
