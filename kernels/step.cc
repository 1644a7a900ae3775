#include "kernels/step.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "base/overloaded.h"
#include "base/status_macros.h"
#include "kernels/backend.h"

namespace hap {
namespace {

constexpr size_t kValueAlign = 256;

// Checks operands one at a time against a step's values.
class OperandCheck {
 public:
  OperandCheck(const StepDesc& desc, size_t index) : desc_(desc), index_(index) {}

  absl::Status operator()(const char* role, StepValueId id, StepElem elem, int64_t elems,
                          bool optional = false) const {
    if (id == kNoStepValue && optional) return absl::OkStatus();
    if (id < 0 || id >= static_cast<int>(desc_.values().size())) {
      return Error(absl::StrFormat("%s names value %d of %d", role, id, desc_.values().size()));
    }
    const StepValue& v = desc_.values()[id];
    if (v.elem != elem) {
      return Error(absl::StrFormat("%s \"%s\" holds %s, the op reads %s", role, v.name,
                                   ElemName(v.elem), ElemName(elem)));
    }
    if (elems < 0 || v.elems < elems) {
      return Error(absl::StrFormat("%s \"%s\" holds %d elements, the op needs %d", role, v.name,
                                   v.elems, elems));
    }
    return absl::OkStatus();
  }
  absl::Status Positive(const char* what, int64_t n) const {
    if (n > 0) return absl::OkStatus();
    return Error(absl::StrFormat("%s is %d", what, n));
  }
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrFormat("step \"%s\", op %d (%s): %s", desc_.name(),
                                                      index_, StepOpName(desc_.ops()[index_]),
                                                      what));
  }

 private:
  static const char* ElemName(StepElem e) { return e == StepElem::kF32 ? "F32" : "I32"; }
  const StepDesc& desc_;
  size_t index_;
};

absl::Status CheckOp(const StepDesc& desc, size_t index) {
  const OperandCheck check(desc, index);
  constexpr StepElem f32 = StepElem::kF32;
  return std::visit(
      Overloaded{
          [&](const step_op::RmsNorm& o) -> absl::Status {
            HAP_RETURN_IF_ERROR(check.Positive("d", o.d));
            if (o.weight == nullptr) return check.Error("no weight");
            const int64_t n = int64_t{o.rows} * o.d;
            HAP_RETURN_IF_ERROR(check("x", o.x, f32, n));
            return check("y", o.y, f32, n);
          },
          [&](const step_op::LayerNorm& o) -> absl::Status {
            HAP_RETURN_IF_ERROR(check.Positive("d", o.d));
            if (o.weight == nullptr || o.bias == nullptr) return check.Error("no weight or bias");
            const int64_t n = int64_t{o.rows} * o.d;
            HAP_RETURN_IF_ERROR(check("x", o.x, f32, n));
            return check("y", o.y, f32, n);
          },
          [&](const step_op::Activate& o) -> absl::Status { return check("x", o.x, f32, o.n); },
          [&](const step_op::Linear& o) -> absl::Status {
            if (o.w.shape.size() != 2 || o.w.data == nullptr) {
              return check.Error("weight " + o.w.Describe() + " is not a matrix [n, k]");
            }
            HAP_RETURN_IF_ERROR(check("x", o.x, f32, o.m * o.w.shape[1]));
            return check("y", o.y, f32, o.m * o.w.shape[0]);
          },
          [&](const step_op::Rope& o) -> absl::Status {
            HAP_RETURN_IF_ERROR(check.Positive("n_heads", o.n_heads));
            HAP_RETURN_IF_ERROR(check.Positive("head_dim", o.head_dim));
            if (o.multi_axis()) {
              if (const char* error = o.AxesArgs().Error(); *error != 0) return check.Error(error);
            }
            HAP_RETURN_IF_ERROR(check("x", o.x, f32, int64_t{o.rows} * o.n_heads * o.head_dim));
            return check("positions", o.positions, StepElem::kI32, int64_t{o.rows} * o.axes());
          },
          [&](const step_op::Attention& o) -> absl::Status {
            const AttentionArgs& a = o.shape;
            const int64_t q = int64_t{a.n_q} * a.n_heads * a.head_dim;
            const int64_t kv = int64_t{a.n_kv} * a.n_kv_heads * a.head_dim;
            HAP_RETURN_IF_ERROR(check("q", o.q, f32, q));
            HAP_RETURN_IF_ERROR(check("k", o.k, f32, kv));
            HAP_RETURN_IF_ERROR(check("v", o.v, f32, kv));
            HAP_RETURN_IF_ERROR(check("out", o.out, f32, q));
            HAP_RETURN_IF_ERROR(
                check("lse", o.lse, f32, int64_t{a.n_heads} * a.n_q, /*optional=*/true));
            if (const char* error = a.SegmentShapeError(); *error != 0) return check.Error(error);
            if ((a.n_segments > 0) != (o.segments != kNoStepValue)) {
              return check.Error("segments must be given exactly when n_segments > 0");
            }
            return check("segments", o.segments, StepElem::kI32, int64_t{a.n_segments} + 1,
                         /*optional=*/true);
          },
          [&](const step_op::Add& o) -> absl::Status {
            HAP_RETURN_IF_ERROR(check("y", o.y, f32, o.n));
            return check("x", o.x, f32, o.n);
          },
          [&](const step_op::SiluMul& o) -> absl::Status {
            HAP_RETURN_IF_ERROR(check("gate", o.gate, f32, o.n));
            return check("up", o.up, f32, o.n);
          },
          [&](const step_op::Call&) { return absl::OkStatus(); },
      },
      desc.ops()[index]);
}

// Runs each op as the backend's op of the same name.
class OpByOpStep final : public PlannedStep {
 public:
  OpByOpStep(const Backend& backend, StepDesc desc)
      : PlannedStep(std::move(desc)), backend_(backend) {}

 private:
  absl::Status RunOp(size_t index, const std::vector<void*>& ptrs, void*) const override {
    return RunStepOp(backend_, desc().ops()[index], ptrs);
  }

  const Backend& backend_;
};

}  // namespace

const char* StepOpName(const StepOp& op) {
  return std::visit(Overloaded{
                        [](const step_op::RmsNorm&) { return "RmsNorm"; },
                        [](const step_op::LayerNorm&) { return "LayerNorm"; },
                        [](const step_op::Activate&) { return "Activate"; },
                        [](const step_op::Linear&) { return "Linear"; },
                        [](const step_op::Rope&) { return "Rope"; },
                        [](const step_op::Attention&) { return "Attention"; },
                        [](const step_op::Add&) { return "Add"; },
                        [](const step_op::SiluMul&) { return "SiluMul"; },
                        [](const step_op::Call&) { return "Call"; },
                    },
                    op);
}

AttentionArgs BoundAttention(const step_op::Attention& op, const std::vector<void*>& ptrs) {
  auto f32 = [&](StepValueId id) { return static_cast<float*>(ptrs[id]); };
  AttentionArgs a = op.shape;
  a.q = f32(op.q);
  a.k = f32(op.k);
  a.v = f32(op.v);
  a.out = f32(op.out);
  a.lse = op.lse == kNoStepValue ? nullptr : f32(op.lse);
  a.segment_bounds =
      op.segments == kNoStepValue ? nullptr : static_cast<const int32_t*>(ptrs[op.segments]);
  return a;
}

absl::Status RunStepOp(const Backend& backend, const StepOp& op, const std::vector<void*>& p) {
  auto f32 = [&](StepValueId id) { return static_cast<float*>(p[id]); };
  return std::visit(
      Overloaded{
          [&](const step_op::RmsNorm& o) {
            return backend.RmsNorm(f32(o.x), o.weight, f32(o.y), o.rows, o.d, o.eps);
          },
          [&](const step_op::LayerNorm& o) {
            return backend.LayerNorm(f32(o.x), o.weight, o.bias, f32(o.y), o.rows, o.d, o.eps);
          },
          [&](const step_op::Activate& o) { return backend.Activate(o.kind, f32(o.x), o.n); },
          [&](const step_op::Linear& o) {
            return backend.Linear(f32(o.x), o.w, o.bias, f32(o.y), o.m, o.rows);
          },
          [&](const step_op::Rope& o) {
            const auto* positions = static_cast<const int32_t*>(p[o.positions]);
            if (!o.multi_axis()) {
              return backend.Rope(f32(o.x), positions, o.rows, o.n_heads, o.head_dim, o.theta);
            }
            RopeAxesArgs a = o.AxesArgs();
            a.x = f32(o.x);
            a.positions = positions;
            return backend.RopeAxes(a);
          },
          [&](const step_op::Attention& o) { return backend.Attention(BoundAttention(o, p)); },
          [&](const step_op::Add& o) { return backend.Add(f32(o.y), f32(o.x), o.n); },
          [&](const step_op::SiluMul& o) { return backend.SiluMul(f32(o.gate), f32(o.up), o.n); },
          [&](const step_op::Call&) {
            return absl::InternalError("a Call op reached the backend");
          },
      },
      op);
}

StepValueId StepDesc::Bound(std::string name, StepElem elem, int64_t elems) {
  values_.push_back({std::move(name), elem, elems, /*bound=*/true});
  ++n_bound_;
  return static_cast<StepValueId>(values_.size()) - 1;
}

StepValueId StepDesc::Scratch(std::string name, StepElem elem, int64_t elems) {
  values_.push_back({std::move(name), elem, elems, /*bound=*/false});
  return static_cast<StepValueId>(values_.size()) - 1;
}

absl::Status CheckStep(const StepDesc& desc) {
  for (const StepValue& v : desc.values()) {
    if (v.elems < 0) {
      return absl::InvalidArgumentError(absl::StrFormat("step \"%s\": value \"%s\" has %d elements",
                                                        desc.name(), v.name, v.elems));
    }
  }
  for (size_t i = 0; i < desc.ops().size(); ++i) HAP_RETURN_IF_ERROR(CheckOp(desc, i));
  return absl::OkStatus();
}

PlannedStep::PlannedStep(StepDesc desc) : desc_(std::move(desc)) {
  const std::vector<StepValue>& values = desc_.values();
  offset_.assign(values.size(), 0);
  bound_slot_.assign(values.size(), -1);
  for (const StepOp& op : desc_.ops()) has_calls_ |= std::holds_alternative<step_op::Call>(op);
  int slot = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].bound) {
      bound_slot_[i] = slot++;
      continue;
    }
    // Every scratch value has a place of its own; both element types are 4 bytes.
    offset_[i] = workspace_bytes_;
    const size_t bytes = static_cast<size_t>(values[i].elems) * 4;
    workspace_bytes_ += (bytes + kValueAlign - 1) / kValueAlign * kValueAlign;
  }
}

size_t PlannedStep::ReserveWorkspace(size_t bytes) {
  const size_t offset = workspace_bytes_;
  workspace_bytes_ += (bytes + kValueAlign - 1) / kValueAlign * kValueAlign;
  return offset;
}

void* PlannedStep::Address(StepValueId id, const StepBindings& b) const {
  if (bound_slot_[id] >= 0) return b.bound[bound_slot_[id]];
  return static_cast<char*>(b.workspace) + offset_[id];
}

absl::StatusOr<int> PlannedStep::Run(const StepBindings& b) const {
  if (static_cast<int>(b.bound.size()) != desc_.n_bound()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step \"%s\": %d bound pointers for %d bound values", desc_.name(),
                        b.bound.size(), desc_.n_bound()));
  }
  if (workspace_bytes_ > 0 &&
      (b.workspace == nullptr ||
       reinterpret_cast<uintptr_t>(b.workspace) % kStepWorkspaceAlign != 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step \"%s\" needs a workspace of %d bytes aligned to %d", desc_.name(),
                        workspace_bytes_, kStepWorkspaceAlign));
  }
  if (has_calls_ && (b.call == nullptr || !*b.call)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step \"%s\" has Call ops and no call function", desc_.name()));
  }
  std::vector<void*> ptrs(desc_.values().size());
  for (size_t i = 0; i < ptrs.size(); ++i) {
    ptrs[i] = Address(static_cast<StepValueId>(i), b);
    if (ptrs[i] == nullptr && desc_.values()[i].elems > 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "step \"%s\": value \"%s\" is bound to null", desc_.name(), desc_.values()[i].name));
    }
  }
  for (size_t i = 0; i < desc_.ops().size(); ++i) {
    if (const auto* call = std::get_if<step_op::Call>(&desc_.ops()[i])) {
      HAP_ASSIGN_OR_RETURN(StepControl control, (*b.call)(call->id));
      if (control == StepControl::kStop) return call->id;
      continue;
    }
    if (absl::Status s = RunOp(i, ptrs, b.workspace); !s.ok()) {
      return absl::Status(s.code(), absl::StrFormat("step \"%s\", op %d (%s): %s", desc_.name(), i,
                                                    StepOpName(desc_.ops()[i]), s.message()));
    }
  }
  return -1;
}

absl::StatusOr<std::unique_ptr<PlannedStep>> PlanOpByOp(const Backend& backend, StepDesc desc) {
  HAP_RETURN_IF_ERROR(CheckStep(desc));
  return std::make_unique<OpByOpStep>(backend, std::move(desc));
}

}  // namespace hap
