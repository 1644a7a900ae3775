// A planned step (docs/design.md §6, "Planned steps"): the engine describes a sequence of ops
// once — the layers of a prefill between two pruning stages, or a whole decode step — over
// named values, and the backend plans it (Backend::Plan): checks every operand once, lays out the
// scratch values in one workspace, and may fuse ops or capture the sequence. The plan then runs
// as often as the engine needs it, each run binding the inputs and outputs and a workspace the
// caller owns (FlashInfer's plan/run split), so nothing is allocated per run.
//
// A Call op hands control back to the engine between ops: what the step cannot express as ops
// of its own (appending rows to a KV cache, attention over a cache's spans, a pruner looking at
// a layer). It ends a run of ops a backend may fuse or capture, and it may stop the run: a
// pruning stage changes the rows, and the engine plans the layers after it for the new count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/tensor.h"
#include "kernels/op_args.h"

namespace hap {

class Backend;

// A value of a step: an index into StepDesc::values().
using StepValueId = int;
inline constexpr StepValueId kNoStepValue = -1;

enum class StepElem { kF32, kI32 };

struct StepValue {
  std::string name;  // how errors and dumps name it, e.g. "layer 3 q"
  StepElem elem = StepElem::kF32;
  int64_t elems = 0;
  // Bound: a pointer the caller gives each run (inputs and outputs). Otherwise a scratch value,
  // placed in the run's workspace.
  bool bound = false;
};

// The ops a step is made of, each the Backend op of the same name with value ids for its arrays.
namespace step_op {

struct RmsNorm {  // y = x / rms(x) · weight, rows of d
  StepValueId x = kNoStepValue, y = kNoStepValue;
  const float* weight = nullptr;  // F32 [d], the backend's memory
  int rows = 0, d = 0;
  float eps = 0.f;
};
struct LayerNorm {  // y = (x − mean) / sqrt(var + eps) · weight + bias, rows of d
  StepValueId x = kNoStepValue, y = kNoStepValue;
  const float* weight = nullptr;  // F32 [d], the backend's memory
  const float* bias = nullptr;    // F32 [d], the backend's memory
  int rows = 0, d = 0;
  float eps = 0.f;
};
struct Activate {  // x = act(x), n values
  Activation kind = Activation::kQuickGelu;
  StepValueId x = kNoStepValue;
  int64_t n = 0;
};
struct Linear {  // y[m, n] = x[m, k] · wᵀ (+ bias)
  StepValueId x = kNoStepValue, y = kNoStepValue;
  TensorView w;                 // [n, k] as placed (Backend::PlaceWeight)
  const float* bias = nullptr;  // optional F32 [n], the backend's memory
  int m = 0;
  LinearRows rows = LinearRows::kOneSequence;
};
struct Rope {  // RoPE in place at the rows' position ids (I32 [rows])
  StepValueId x = kNoStepValue, positions = kNoStepValue;
  int rows = 0, n_heads = 0, head_dim = 0;
  float theta = 0.f;
  // Rotary over several position axes (Backend::RopeAxes, RopeAxesArgs' sections and
  // frequencies): positions are then I32 [rows, axes]. All zero: Backend::Rope.
  int sections[3] = {0, 0, 0};
  bool per_section_frequencies = false;

  bool multi_axis() const { return sections[0] + sections[1] + sections[2] > 0; }
  // RopeAxes' arguments without the pointers (for a multi-axis op).
  RopeAxesArgs AxesArgs() const {
    RopeAxesArgs a;
    a.rows = rows, a.n_heads = n_heads, a.head_dim = head_dim, a.theta = theta;
    for (int i = 0; i < 3; ++i) a.sections[i] = sections[i];
    a.per_section_frequencies = per_section_frequencies;
    return a;
  }
  // Position values per row.
  int axes() const { return multi_axis() ? AxesArgs().axes() : 1; }
};
struct Attention {  // AttentionArgs with values for its arrays; lse may be kNoStepValue
  StepValueId q = kNoStepValue, k = kNoStepValue, v = kNoStepValue, out = kNoStepValue,
              lse = kNoStepValue;
  AttentionArgs shape;  // every field but the pointers
  // The segment bounds, I32 [shape.n_segments + 1], exactly when shape.n_segments > 0.
  StepValueId segments = kNoStepValue;
};
struct Add {  // y += x
  StepValueId y = kNoStepValue, x = kNoStepValue;
  int64_t n = 0;
};
struct SiluMul {  // gate = silu(gate) · up
  StepValueId gate = kNoStepValue, up = kNoStepValue;
  int64_t n = 0;
};
struct Call {  // the engine's code runs here; `id` tells it which point of the step this is
  int id = 0;
  // The values that code reads, where the engine lists them (`listed`); otherwise it may read
  // any, and a backend fuses nothing that would leave one of them stale at this point. It may
  // write any value either way.
  bool listed = false;
  std::vector<StepValueId> reads;
};

}  // namespace step_op

using StepOp =
    std::variant<step_op::RmsNorm, step_op::LayerNorm, step_op::Activate, step_op::Linear,
                 step_op::Rope, step_op::Attention, step_op::Add, step_op::SiluMul, step_op::Call>;

// The name an op kind has in errors and counts ("RmsNorm", "Linear", ...).
const char* StepOpName(const StepOp& op);

// What the engine describes once: values, then ops in the order they run.
class StepDesc {
 public:
  explicit StepDesc(std::string name) : name_(std::move(name)) {}

  StepValueId Bound(std::string name, StepElem elem, int64_t elems);
  StepValueId Scratch(std::string name, StepElem elem, int64_t elems);
  void Add(StepOp op) { ops_.push_back(std::move(op)); }

  const std::string& name() const { return name_; }
  const std::vector<StepValue>& values() const { return values_; }
  const std::vector<StepOp>& ops() const { return ops_; }
  int n_bound() const { return n_bound_; }

 private:
  std::string name_;
  std::vector<StepValue> values_;
  std::vector<StepOp> ops_;
  int n_bound_ = 0;
};

// What a Call tells the run: go on with the next op, or end the run after this call.
enum class StepControl { kContinue, kStop };
using StepCallFn = std::function<absl::StatusOr<StepControl>(int call_id)>;

// One run's bindings.
struct StepBindings {
  // One pointer per bound value, in the order StepDesc::Bound declared them, each to at least
  // the value's elements in the backend's memory.
  absl::Span<void* const> bound;
  // workspace_bytes() of the backend's memory, aligned to kStepWorkspaceAlign (as
  // Backend::Allocate aligns); every scratch value starts at a multiple of 256 bytes in it. May
  // be null when the plan needs none.
  void* workspace = nullptr;
  // Called at each Call op; required when the step has any.
  const StepCallFn* call = nullptr;
};

inline constexpr size_t kStepWorkspaceAlign = 64;

class PlannedStep {
 public:
  virtual ~PlannedStep() = default;

  const StepDesc& desc() const { return desc_; }
  // Bytes of workspace a run needs.
  size_t workspace_bytes() const { return workspace_bytes_; }
  // Where value `id` lives in a run with these bindings: its bound pointer, or its place in the
  // workspace. What a Call reads (a layer's queries and keys) and writes.
  void* Address(StepValueId id, const StepBindings& bindings) const;
  template <typename T>
  T* At(StepValueId id, const StepBindings& bindings) const {
    return static_cast<T*>(Address(id, bindings));
  }

  // Runs the ops in order. Returns the id of the Call that stopped the run, or -1 when every op
  // ran. InvalidArgument, before any op runs, when the bindings do not match the description
  // (count, null pointers, a missing workspace or call function); an op's error ends the run
  // with that error, naming the op and its place in the step.
  absl::StatusOr<int> Run(const StepBindings& bindings) const;

 protected:
  // desc has been checked (CheckStep); the layout is computed here.
  explicit PlannedStep(StepDesc desc);
  // Runs op `index` (not a Call) with its operands at `ptrs` (one address per value) and the
  // run's workspace.
  virtual absl::Status RunOp(size_t index, const std::vector<void*>& ptrs,
                             void* workspace) const = 0;
  // `bytes` more of workspace for the plan's own use (a fused op's intermediate), placed after
  // the values; returns its offset (a multiple of 256). Call from the constructor only.
  size_t ReserveWorkspace(size_t bytes);

 private:
  StepDesc desc_;
  std::vector<size_t> offset_;   // per value: its workspace offset (scratch values)
  std::vector<int> bound_slot_;  // per value: its index among the bound ones, or -1
  size_t workspace_bytes_ = 0;
  bool has_calls_ = false;
};

// OK when every operand of every op names a value of the right element type holding at least
// the elements the op reads or writes; else InvalidArgument naming the step, the op (index and
// kind) and the operand.
absl::Status CheckStep(const StepDesc& desc);

// Runs `op` (not a Call) as `backend`'s op of the same name, its operands at `ptrs` (one address
// per value of the step): what an op-by-op plan does for each op, and a fusing plan for the ops
// it leaves alone.
absl::Status RunStepOp(const Backend& backend, const StepOp& op, const std::vector<void*>& ptrs);

// An Attention op's AttentionArgs with its values' addresses `ptrs` (one per value of the step).
AttentionArgs BoundAttention(const step_op::Attention& op, const std::vector<void*>& ptrs);

// The plan every backend can make: each op is the backend's op of the same name, one after the
// other (the CPU backend's Plan).
absl::StatusOr<std::unique_ptr<PlannedStep>> PlanOpByOp(const Backend& backend, StepDesc desc);

}  // namespace hap
