// Planned steps (kernels/step.h) on every backend (the CPU one and the CUDA one on the SIMT
// emulation): a plan computes exactly what its ops called one by one compute, places its scratch
// values in the caller's workspace, hands control to the caller at its Calls (which may stop the
// run), and refuses a description or a run that does not hold together with an error naming
// the step, the op and the operand.
#include "kernels/step.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "base/dtype.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/kernels/attention_args.h"
#include "tests/kernels/backends.h"

namespace hap {
namespace {

using testing_support::Random;

// Whether `text` contains `part`, saying what it holds when not.
::testing::AssertionResult Contains(absl::string_view text, absl::string_view part) {
  if (text.find(part) != absl::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" lacks \"" << part << "\"";
}

template <typename T>
BackendArray<T> Upload(const Backend& b, const std::vector<T>& host) {
  BackendArray<T> a(b);
  EXPECT_TRUE(a.Assign(host.data(), host.size()).ok());
  return a;
}

template <typename T>
std::vector<T> Download(const BackendArray<T>& a) {
  std::vector<T> h(a.size());
  EXPECT_TRUE(a.CopyTo(h.data()).ok());
  return h;
}

std::vector<float> DownloadF32(const Backend& b, const float* p, size_t n) {
  std::vector<float> h(n);
  EXPECT_TRUE(b.CopyToHost(h.data(), p, n * sizeof(float)).ok());
  return h;
}

// A small attention block: d 32, 4 query heads over 2 KV heads of 8, an MLP of 48, 5 rows.
struct Block {
  static constexpr int kRows = 5, kD = 32, kHeads = 4, kKvHeads = 2, kHd = 8, kFfn = 48;
  static constexpr float kEps = 1e-5f, kTheta = 10000.f;
  // Weights in `dtype` (F32, or BF16/F16 rounded from the same values).
  explicit Block(const Backend& b, DType dtype = DType::kF32) : backend(b), norm(b) {
    norm = Upload(b, Random(kD, 11, 0.5f));
    for (int i = 0; i < 6; ++i) {
      // q [heads·hd, d], k and v [kv_heads·hd, d], gate and up [ffn, d], o [d, heads·hd]
      const int n = i == 0 ? kHeads * kHd : i < 3 ? kKvHeads * kHd : i < 5 ? kFfn : kD;
      const int k = i < 5 ? kD : kHeads * kHd;
      host[i] = Random(static_cast<size_t>(n) * k, 20 + i, 0.2f);
      const void* data = host[i].data();
      if (dtype != DType::kF32) {
        narrow[i].resize(host[i].size());
        ConvertFromF32(dtype, host[i].data(), narrow[i].data(), host[i].size());
        data = narrow[i].data();
      }
      w[i] = *b.PlaceWeight(TensorView(data, dtype, Device::kCpu, {n, k}), &storage[i]);
    }
  }
  AttentionArgs Shape() const {
    // The op's shape only: the step binds the pointers.
    return testing_support::SelfAttention(nullptr, nullptr, nullptr, nullptr, nullptr, kRows,
                                          kHeads, kKvHeads, kHd, 0.35f, /*causal=*/true);
  }
  const Backend& backend;
  BackendArray<float> norm;
  std::vector<float> host[6];
  std::vector<uint16_t> narrow[6];
  BackendBuffer storage[6];
  TensorView w[6];  // q, k, v, gate, up [ffn, d] ... and o [d, heads·hd]
};

class StepTest : public ::testing::TestWithParam<const Backend*> {
 protected:
  const Backend& b() const { return *GetParam(); }
};

TEST_P(StepTest, APlanComputesWhatItsOpsComputeOneByOne) {
  using B = Block;
  Block blk(b());
  const std::vector<float> x0 = Random(size_t{B::kRows} * B::kD, 1);
  const std::vector<int32_t> pos0 = {0, 1, 2, 5, 9};  // gaps, as after pruning
  const int q_dim = B::kHeads * B::kHd, kv_dim = B::kKvHeads * B::kHd;
  const int n = B::kRows;

  // The ops one by one.
  BackendArray<float> x = Upload(b(), x0);
  BackendArray<int32_t> pos = Upload(b(), pos0);
  BackendArray<float> h(b()), q(b()), k(b()), v(b()), attn(b()), lse(b()), gate(b()), up(b());
  ASSERT_TRUE(h.Resize(size_t{n} * B::kD).ok());
  ASSERT_TRUE(q.Resize(size_t{n} * q_dim).ok());
  ASSERT_TRUE(k.Resize(size_t{n} * kv_dim).ok());
  ASSERT_TRUE(v.Resize(size_t{n} * kv_dim).ok());
  ASSERT_TRUE(attn.Resize(size_t{n} * q_dim).ok());
  ASSERT_TRUE(lse.Resize(size_t{B::kHeads} * n).ok());
  ASSERT_TRUE(gate.Resize(size_t{n} * B::kFfn).ok());
  ASSERT_TRUE(up.Resize(size_t{n} * B::kFfn).ok());
  const LinearRows rows = LinearRows::kOneSequence;
  ASSERT_TRUE(b().RmsNorm(x.data(), blk.norm.data(), h.data(), n, B::kD, B::kEps).ok());
  ASSERT_TRUE(b().Linear(h.data(), blk.w[0], nullptr, q.data(), n, rows).ok());
  ASSERT_TRUE(b().Linear(h.data(), blk.w[1], nullptr, k.data(), n, rows).ok());
  ASSERT_TRUE(b().Linear(h.data(), blk.w[2], nullptr, v.data(), n, rows).ok());
  ASSERT_TRUE(b().Rope(q.data(), pos.data(), n, B::kHeads, B::kHd, B::kTheta).ok());
  ASSERT_TRUE(b().Rope(k.data(), pos.data(), n, B::kKvHeads, B::kHd, B::kTheta).ok());
  AttentionArgs a = blk.Shape();
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.out = attn.data();
  a.lse = lse.data();
  ASSERT_TRUE(b().Attention(a).ok());
  ASSERT_TRUE(b().Linear(attn.data(), blk.w[5], nullptr, h.data(), n, rows).ok());
  ASSERT_TRUE(b().Add(x.data(), h.data(), int64_t{n} * B::kD).ok());
  ASSERT_TRUE(b().Linear(x.data(), blk.w[3], nullptr, gate.data(), n, rows).ok());
  ASSERT_TRUE(b().Linear(x.data(), blk.w[4], nullptr, up.data(), n, rows).ok());
  ASSERT_TRUE(b().SiluMul(gate.data(), up.data(), int64_t{n} * B::kFfn).ok());
  const std::vector<float> want_x = Download(x), want_gate = Download(gate),
                           want_lse = Download(lse), want_q = Download(q);

  // The same ops as one planned step, with a Call after the attention that reads q.
  StepDesc desc("block");
  const StepValueId vx = desc.Bound("x", StepElem::kF32, int64_t{n} * B::kD);
  const StepValueId vpos = desc.Bound("positions", StepElem::kI32, n);
  const StepValueId vgate_out = desc.Bound("gate", StepElem::kF32, int64_t{n} * B::kFfn);
  const StepValueId vh = desc.Scratch("h", StepElem::kF32, int64_t{n} * B::kD);
  const StepValueId vq = desc.Scratch("q", StepElem::kF32, int64_t{n} * q_dim);
  const StepValueId vk = desc.Scratch("k", StepElem::kF32, int64_t{n} * kv_dim);
  const StepValueId vv = desc.Scratch("v", StepElem::kF32, int64_t{n} * kv_dim);
  const StepValueId vattn = desc.Scratch("attn", StepElem::kF32, int64_t{n} * q_dim);
  const StepValueId vlse = desc.Scratch("lse", StepElem::kF32, int64_t{B::kHeads} * n);
  const StepValueId vup = desc.Scratch("up", StepElem::kF32, int64_t{n} * B::kFfn);
  desc.Add(step_op::RmsNorm{vx, vh, blk.norm.data(), n, B::kD, B::kEps});
  desc.Add(step_op::Linear{vh, vq, blk.w[0], nullptr, n, rows});
  desc.Add(step_op::Linear{vh, vk, blk.w[1], nullptr, n, rows});
  desc.Add(step_op::Linear{vh, vv, blk.w[2], nullptr, n, rows});
  desc.Add(step_op::Rope{vq, vpos, n, B::kHeads, B::kHd, B::kTheta});
  desc.Add(step_op::Rope{vk, vpos, n, B::kKvHeads, B::kHd, B::kTheta});
  step_op::Attention att{vq, vk, vv, vattn, vlse, blk.Shape()};
  desc.Add(att);
  desc.Add(step_op::Call{7, false, {}});
  desc.Add(step_op::Linear{vattn, vh, blk.w[5], nullptr, n, rows});
  desc.Add(step_op::Add{vx, vh, int64_t{n} * B::kD});
  desc.Add(step_op::Linear{vx, vgate_out, blk.w[3], nullptr, n, rows});
  desc.Add(step_op::Linear{vx, vup, blk.w[4], nullptr, n, rows});
  desc.Add(step_op::SiluMul{vgate_out, vup, int64_t{n} * B::kFfn});
  absl::StatusOr<std::unique_ptr<PlannedStep>> plan = b().Plan(desc);
  ASSERT_TRUE(plan.ok()) << plan.status();

  BackendArray<float> px = Upload(b(), x0), pgate(b());
  BackendArray<int32_t> ppos = Upload(b(), pos0);
  ASSERT_TRUE(pgate.Resize(size_t{n} * B::kFfn).ok());
  BackendArray<uint8_t> workspace(b());
  ASSERT_TRUE(workspace.Resize((*plan)->workspace_bytes()).ok());
  void* bound[3] = {px.data(), ppos.data(), pgate.data()};
  StepBindings bindings;
  bindings.bound = bound;
  bindings.workspace = workspace.data();
  std::vector<float> seen_q, seen_lse;
  int calls = 0;
  const StepCallFn call = [&](int id) -> absl::StatusOr<StepControl> {
    EXPECT_EQ(id, 7);
    ++calls;
    seen_q = DownloadF32(b(), (*plan)->At<float>(vq, bindings), size_t{n} * q_dim);
    seen_lse = DownloadF32(b(), (*plan)->At<float>(vlse, bindings), size_t{B::kHeads} * n);
    return StepControl::kContinue;
  };
  bindings.call = &call;
  absl::StatusOr<int> ran = (*plan)->Run(bindings);
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(*ran, -1);  // every op ran
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen_q, want_q);  // bit for bit: the same ops in the same order
  EXPECT_EQ(seen_lse, want_lse);
  EXPECT_EQ(Download(px), want_x);
  EXPECT_EQ(Download(pgate), want_gate);

  // A second run with the same bindings starts again from the inputs it is given.
  ASSERT_TRUE(px.Assign(x0.data(), x0.size()).ok());
  calls = 0;
  ASSERT_TRUE((*plan)->Run(bindings).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(Download(px), want_x);
}

// A decoder layer's ops as a step: the norm's rows feed three products, the second norm's two.
struct LayerStep {
  StepDesc desc{"layer"};
  StepValueId x, pos, gate;
};
LayerStep DescribeLayer(const Block& blk) {
  using B = Block;
  const int n = B::kRows, q_dim = B::kHeads * B::kHd, kv_dim = B::kKvHeads * B::kHd;
  LayerStep s;
  StepDesc& d = s.desc;
  s.x = d.Bound("x", StepElem::kF32, int64_t{n} * B::kD);
  s.pos = d.Bound("positions", StepElem::kI32, n);
  s.gate = d.Bound("gate", StepElem::kF32, int64_t{n} * B::kFfn);
  const StepValueId h = d.Scratch("h", StepElem::kF32, int64_t{n} * B::kD);
  const StepValueId q = d.Scratch("q", StepElem::kF32, int64_t{n} * q_dim);
  const StepValueId k = d.Scratch("k", StepElem::kF32, int64_t{n} * kv_dim);
  const StepValueId v = d.Scratch("v", StepElem::kF32, int64_t{n} * kv_dim);
  const StepValueId attn = d.Scratch("attn", StepElem::kF32, int64_t{n} * q_dim);
  const StepValueId up = d.Scratch("up", StepElem::kF32, int64_t{n} * B::kFfn);
  const LinearRows rows = LinearRows::kOneSequence;
  d.Add(step_op::RmsNorm{s.x, h, blk.norm.data(), n, B::kD, B::kEps});
  d.Add(step_op::Linear{h, q, blk.w[0], nullptr, n, rows});
  d.Add(step_op::Linear{h, k, blk.w[1], nullptr, n, rows});
  d.Add(step_op::Linear{h, v, blk.w[2], nullptr, n, rows});
  d.Add(step_op::Rope{q, s.pos, n, B::kHeads, B::kHd, B::kTheta});
  d.Add(step_op::Rope{k, s.pos, n, B::kKvHeads, B::kHd, B::kTheta});
  d.Add(step_op::Attention{q, k, v, attn, kNoStepValue, blk.Shape()});
  d.Add(step_op::Linear{attn, h, blk.w[5], nullptr, n, rows});
  d.Add(step_op::Add{s.x, h, int64_t{n} * B::kD});
  d.Add(step_op::RmsNorm{s.x, h, blk.norm.data(), n, B::kD, B::kEps});
  d.Add(step_op::Linear{h, s.gate, blk.w[3], nullptr, n, rows});
  d.Add(step_op::Linear{h, up, blk.w[4], nullptr, n, rows});
  d.Add(step_op::SiluMul{s.gate, up, int64_t{n} * B::kFfn});
  return s;
}

// What a run of a layer step binds: x (uploaded from x0), Block's positions, the gate and the
// plan's workspace.
struct LayerRun {
  LayerRun(const Backend& b, const PlannedStep& plan, const std::vector<float>& x0)
      : x(Upload(b, x0)),
        gate(b),
        pos(Upload(b, std::vector<int32_t>{0, 1, 2, 5, 9})),
        workspace(b) {
    EXPECT_TRUE(gate.Resize(size_t{Block::kRows} * Block::kFfn).ok());
    EXPECT_TRUE(workspace.Resize(plan.workspace_bytes()).ok());
    bound[0] = x.data();
    bound[1] = pos.data();
    bound[2] = gate.data();
    bindings.bound = bound;
    bindings.workspace = workspace.data();
  }
  BackendArray<float> x, gate;
  BackendArray<int32_t> pos;
  BackendArray<uint8_t> workspace;
  void* bound[3];
  StepBindings bindings;
};

// The backend's own plan (the CUDA one rounds each norm's rows once for the products after it)
// gives the op-by-op plan's results bit for bit, for every weight dtype.
TEST_P(StepTest, TheBackendsPlanEqualsTheOpByOpPlanBitForBit) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    Block blk(b(), dtype);
    const std::vector<float> x0 = Random(size_t{Block::kRows} * Block::kD, 3);
    std::vector<float> results[2][2];  // [plan][x, gate]
    for (int which = 0; which < 2; ++which) {
      LayerStep layer = DescribeLayer(blk);
      absl::StatusOr<std::unique_ptr<PlannedStep>> plan =
          which == 0 ? b().Plan(layer.desc) : PlanOpByOp(b(), layer.desc);
      ASSERT_TRUE(plan.ok()) << plan.status();
      LayerRun r(b(), **plan, x0);
      absl::StatusOr<int> ran = (*plan)->Run(r.bindings);
      ASSERT_TRUE(ran.ok()) << ran.status();
      results[which][0] = Download(r.x);
      results[which][1] = Download(r.gate);
    }
    EXPECT_EQ(results[0][0], results[1][0]) << DTypeName(dtype);
    EXPECT_EQ(results[0][1], results[1][1]) << DTypeName(dtype);
  }
}

// A run of the backend's plan captured as a graph (Backend::Capture) replays, on new inputs in
// the same buffers, what a run computes on them, bit for bit, fusions included (the CPU backend
// has no capture).
TEST_P(StepTest, ACapturedRunReplaysWhatARunComputes) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    Block blk(b(), dtype);
    LayerStep layer = DescribeLayer(blk);
    absl::StatusOr<std::unique_ptr<PlannedStep>> plan = b().Plan(layer.desc);
    ASSERT_TRUE(plan.ok()) << plan.status();
    LayerRun r(b(), **plan, std::vector<float>(size_t{Block::kRows} * Block::kD, 0.f));
    BackendArray<float>& x = r.x;
    auto run = [&]() -> absl::Status { return (*plan)->Run(r.bindings).status(); };
    absl::StatusOr<std::unique_ptr<BackendGraph>> graph = b().Capture(run);
    if (b().caps().host_memory) {
      EXPECT_EQ(graph.status().code(), absl::StatusCode::kUnimplemented);
      return;
    }
    ASSERT_TRUE(graph.ok()) << graph.status();
    for (uint32_t seed : {3u, 4u}) {
      const std::vector<float> x0 = Random(size_t{Block::kRows} * Block::kD, seed);
      ASSERT_TRUE(x.Assign(x0.data(), x0.size()).ok());
      ASSERT_TRUE(run().ok());
      const std::vector<float> want_x = Download(x), want_gate = Download(r.gate);
      ASSERT_TRUE(x.Assign(x0.data(), x0.size()).ok());
      ASSERT_TRUE((*graph)->Replay().ok());
      EXPECT_EQ(Download(x), want_x) << seed;
      EXPECT_EQ(Download(r.gate), want_gate) << seed;
    }
  }
}

TEST_P(StepTest, ACallThatStopsEndsTheRunThere) {
  StepDesc desc("stop");
  const StepValueId y = desc.Bound("y", StepElem::kF32, 4);
  const StepValueId x = desc.Bound("x", StepElem::kF32, 4);
  desc.Add(step_op::Add{y, x, 4});
  desc.Add(step_op::Call{3, false, {}});
  desc.Add(step_op::Add{y, x, 4});  // not reached
  auto plan = b().Plan(desc);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->workspace_bytes(), 0u);
  BackendArray<float> dy = Upload(b(), std::vector<float>{1, 2, 3, 4});
  BackendArray<float> dx = Upload(b(), std::vector<float>{10, 20, 30, 40});
  void* bound[2] = {dy.data(), dx.data()};
  const StepCallFn stop = [](int) -> absl::StatusOr<StepControl> { return StepControl::kStop; };
  StepBindings bindings;
  bindings.bound = bound;
  bindings.call = &stop;
  absl::StatusOr<int> ran = (*plan)->Run(bindings);
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(*ran, 3);
  EXPECT_EQ(Download(dy), (std::vector<float>{11, 22, 33, 44}));

  // A call's error ends the run with that error, untouched.
  const StepCallFn fail = [](int) -> absl::StatusOr<StepControl> {
    return absl::CancelledError("cancelled at the call");
  };
  bindings.call = &fail;
  EXPECT_EQ((*plan)->Run(bindings).status(), absl::CancelledError("cancelled at the call"));
}

TEST_P(StepTest, ScratchValuesHaveDisjointAlignedPlacesInTheWorkspace) {
  StepDesc desc("layout");
  const StepValueId a = desc.Scratch("a", StepElem::kF32, 1);
  const StepValueId bound = desc.Bound("in", StepElem::kF32, 8);
  const StepValueId c = desc.Scratch("c", StepElem::kI32, 64);  // 256 bytes exactly
  const StepValueId d = desc.Scratch("d", StepElem::kF32, 65);  // 260 bytes → 512
  desc.Add(step_op::Add{a, a, 1});
  auto plan = b().Plan(desc);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->workspace_bytes(), 256u + 256u + 512u);
  char* base = reinterpret_cast<char*>(uintptr_t{1} << 20);
  float in[8];
  void* ptrs[1] = {in};
  StepBindings bindings;
  bindings.bound = ptrs;
  bindings.workspace = base;
  EXPECT_EQ((*plan)->Address(a, bindings), base);
  EXPECT_EQ((*plan)->Address(c, bindings), base + 256);
  EXPECT_EQ((*plan)->Address(d, bindings), base + 512);
  EXPECT_EQ((*plan)->Address(bound, bindings), in);
}

// A multi-axis Rope op (M-RoPE's sections over [rows, 3] positions) is the backend's RopeAxes,
// and with the q and k of a layer beside it does not take the 1-D pair's fused path.
TEST_P(StepTest, AMultiAxisRopeIsTheBackendsRopeAxes) {
  constexpr int kRows = 5, kHeads = 2, kHd = 16;
  const std::vector<float> x0 = Random(size_t{kRows} * kHeads * kHd, 8);
  const std::vector<int32_t> pos0 = {3, 3, 3, 4, 4, 5, 4, 5, 4, 4, 5, 5, 8, 8, 8};  // (t, h, w)
  StepDesc desc("m-rope");
  const StepValueId q = desc.Bound("q", StepElem::kF32, int64_t{kRows} * kHeads * kHd);
  const StepValueId k = desc.Bound("k", StepElem::kF32, int64_t{kRows} * kHeads * kHd);
  const StepValueId pos = desc.Bound("pos", StepElem::kI32, int64_t{kRows} * 3);
  step_op::Rope rope{q, pos, kRows, kHeads, kHd, 1e6f};
  rope.sections[0] = 2, rope.sections[1] = 3, rope.sections[2] = 3;
  desc.Add(rope);
  rope.x = k;
  desc.Add(rope);
  absl::StatusOr<std::unique_ptr<PlannedStep>> plan = b().Plan(desc);
  ASSERT_TRUE(plan.ok()) << plan.status();
  BackendArray<float> dq = Upload(b(), x0), dk = Upload(b(), x0), want = Upload(b(), x0);
  BackendArray<int32_t> dpos = Upload(b(), pos0);
  void* bound[3] = {dq.data(), dk.data(), dpos.data()};
  StepBindings bindings;
  bindings.bound = bound;
  BackendArray<uint8_t> workspace(b());
  ASSERT_TRUE(workspace.Resize((*plan)->workspace_bytes()).ok());
  bindings.workspace = workspace.data();
  ASSERT_TRUE((*plan)->Run(bindings).ok());
  RopeAxesArgs a = rope.AxesArgs();
  a.x = want.data();
  a.positions = dpos.data();
  ASSERT_TRUE(b().RopeAxes(a).ok());
  EXPECT_EQ(Download(dq), Download(want));
  EXPECT_EQ(Download(dk), Download(want));
  // Rows at one position on every axis turn as 1-D RoPE does.
  std::vector<float> one_axis = x0;
  const std::vector<int32_t> flat = {3, 4, 4, 5, 8};
  ASSERT_TRUE(CpuBackend().Rope(one_axis.data(), flat.data(), kRows, kHeads, kHd, 1e6f).ok());
  std::vector<float> same = x0;
  std::vector<int32_t> equal_axes;
  for (int32_t p : flat) equal_axes.insert(equal_axes.end(), {p, p, p});
  RopeAxesArgs e = rope.AxesArgs();
  e.x = same.data();
  e.positions = equal_axes.data();
  ASSERT_TRUE(CpuBackend().RopeAxes(e).ok());
  EXPECT_EQ(same, one_axis);

  StepDesc bad("bad sections");
  const StepValueId bx = bad.Bound("x", StepElem::kF32, int64_t{kRows} * kHeads * kHd);
  const StepValueId bp = bad.Bound("pos", StepElem::kI32, kRows);  // [rows, 3] expected
  step_op::Rope short_pos{bx, bp, kRows, kHeads, kHd, 1e6f};
  short_pos.sections[0] = 2, short_pos.sections[1] = 3, short_pos.sections[2] = 3;
  bad.Add(short_pos);
  absl::Status s = b().Plan(bad).status();
  EXPECT_TRUE(Contains(s.message(), "positions \"pos\" holds 5 elements, the op needs 15"));
  step_op::Rope wrong = short_pos;
  wrong.sections[2] = 2;  // 7 pairs of 8
  StepDesc bad2("bad sum");
  bad2.Bound("x", StepElem::kF32, int64_t{kRows} * kHeads * kHd);
  bad2.Bound("pos", StepElem::kI32, int64_t{kRows} * 3);
  bad2.Add(wrong);
  s = b().Plan(bad2).status();
  EXPECT_TRUE(Contains(s.message(), "sum to head_dim / 2"));
}

// A segmented (variable-length) Attention op reads its bounds from a value of the step and gives
// the backend's own Attention with those bounds, bit for bit, with narrow operands too (the
// tensor-core path on a GPU). A description with segments and no bounds value is refused.
TEST_P(StepTest, ASegmentedAttentionIsTheBackendsAttention) {
  constexpr int kRows = 70, kHeads = 2, kHd = 16;
  const std::vector<int32_t> bounds = {0, 20, 20, 70};
  const std::vector<float> q0 = Random(size_t{kRows} * kHeads * kHd, 11);
  const std::vector<float> k0 = Random(size_t{kRows} * kHeads * kHd, 12);
  const std::vector<float> v0 = Random(size_t{kRows} * kHeads * kHd, 13);
  for (const DType operands : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(operands));
    AttentionArgs shape = testing_support::SelfAttention(nullptr, nullptr, nullptr, nullptr,
                                                         nullptr, kRows, kHeads, kHeads, kHd, 0.25f,
                                                         /*causal=*/true);
    shape.operands = operands;
    shape.n_segments = static_cast<int>(bounds.size()) - 1;
    StepDesc desc("windows");
    const int64_t elems = int64_t{kRows} * kHeads * kHd;
    const StepValueId q = desc.Bound("q", StepElem::kF32, elems);
    const StepValueId k = desc.Bound("k", StepElem::kF32, elems);
    const StepValueId v = desc.Bound("v", StepElem::kF32, elems);
    const StepValueId out = desc.Bound("out", StepElem::kF32, elems);
    const StepValueId seg = desc.Bound("bounds", StepElem::kI32, shape.n_segments + 1);
    desc.Add(step_op::Attention{q, k, v, out, kNoStepValue, shape, seg});
    absl::StatusOr<std::unique_ptr<PlannedStep>> plan = b().Plan(desc);
    ASSERT_TRUE(plan.ok()) << plan.status();
    BackendArray<float> dq = Upload(b(), q0), dk = Upload(b(), k0), dv = Upload(b(), v0);
    BackendArray<float> dout(b()), want(b());
    ASSERT_TRUE(dout.Resize(elems).ok());
    ASSERT_TRUE(want.Resize(elems).ok());
    BackendArray<int32_t> dbounds = Upload(b(), bounds);
    void* bound[5] = {dq.data(), dk.data(), dv.data(), dout.data(), dbounds.data()};
    StepBindings bindings;
    bindings.bound = bound;
    BackendArray<uint8_t> workspace(b());
    ASSERT_TRUE(workspace.Resize(std::max<size_t>(1, (*plan)->workspace_bytes())).ok());
    bindings.workspace = workspace.data();
    ASSERT_TRUE((*plan)->Run(bindings).ok());
    AttentionArgs a = shape;
    a.q = dq.data(), a.k = dk.data(), a.v = dv.data(), a.out = want.data();
    a.segment_bounds = dbounds.data();
    ASSERT_TRUE(b().Attention(a).ok());
    const std::vector<float> got = Download(dout);
    EXPECT_EQ(got, Download(want));
    // Row 20 starts the last segment: causal within it, it sees only key 20, so its output is
    // v's row 20 (up to the operands' rounding of the value row).
    for (int h = 0; h < kHeads; ++h) {
      for (int t = 0; t < kHd; ++t) {
        const int64_t at = int64_t{20} * kHeads * kHd + h * kHd + t;
        EXPECT_NEAR(got[at], v0[at], operands == DType::kF32 ? 1e-6 : 4e-3);
      }
    }

    StepDesc missing("no bounds");
    const StepValueId mq = missing.Bound("q", StepElem::kF32, elems);
    missing.Add(step_op::Attention{mq, mq, mq, mq, kNoStepValue, shape});
    absl::Status s = b().Plan(missing).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(s.message(), "segments must be given exactly when n_segments > 0"))
        << s.message();
  }
}

TEST_P(StepTest, ADescriptionThatDoesNotHoldTogetherIsRefusedNamingTheOperand) {
  {
    StepDesc desc("wrong type");
    const StepValueId x = desc.Bound("x", StepElem::kF32, 2 * 4 * 8);
    const StepValueId pos = desc.Bound("pos", StepElem::kF32, 2);  // I32 expected
    desc.Add(step_op::Add{x, x, 1});
    desc.Add(step_op::Rope{x, pos, 2, 4, 8, 10000.f});
    absl::Status s = b().Plan(desc).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(s.message(), "step \"wrong type\", op 1 (Rope)"));
    EXPECT_TRUE(Contains(s.message(), "positions \"pos\" holds F32, the op reads I32"));
  }
  {
    StepDesc desc("too small");
    const StepValueId y = desc.Scratch("y", StepElem::kF32, 10);
    const StepValueId x = desc.Scratch("x", StepElem::kF32, 20);
    desc.Add(step_op::SiluMul{x, y, 20});
    absl::Status s = b().Plan(desc).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(
        Contains(s.message(), "op 0 (SiluMul): up \"y\" holds 10 elements, the op needs 20"));
  }
  {
    StepDesc desc("no such value");
    const StepValueId x = desc.Scratch("x", StepElem::kF32, 4);
    desc.Add(step_op::Add{x, x + 5, 4});
    absl::Status s = b().Plan(desc).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(s.message(), "op 0 (Add): x names value 5 of 1"));
  }
  {
    StepDesc desc("no weight");
    const StepValueId x = desc.Scratch("x", StepElem::kF32, 4);
    desc.Add(step_op::Linear{x, x, TensorView(), nullptr, 1, LinearRows::kOneSequence});
    absl::Status s = b().Plan(desc).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(s.message(), "op 0 (Linear): weight"));
  }
}

TEST_P(StepTest, ARunWithBindingsThatDoNotMatchIsRefused) {
  StepDesc desc("bindings");
  const StepValueId y = desc.Bound("y", StepElem::kF32, 4);
  const StepValueId s = desc.Scratch("s", StepElem::kF32, 4);
  desc.Add(step_op::Add{y, s, 4});
  desc.Add(step_op::Call{0, false, {}});
  auto plan = b().Plan(desc);
  ASSERT_TRUE(plan.ok()) << plan.status();
  BackendArray<float> dy = Upload(b(), std::vector<float>{1, 2, 3, 4});
  BackendArray<uint8_t> workspace(b());
  ASSERT_TRUE(workspace.Resize((*plan)->workspace_bytes()).ok());
  void* none[2] = {dy.data(), dy.data()};
  const StepCallFn go = [](int) -> absl::StatusOr<StepControl> { return StepControl::kContinue; };

  // Two pointers for one bound value.
  const StepBindings two{.bound = none, .workspace = workspace.data(), .call = &go};
  EXPECT_TRUE(Contains((*plan)->Run(two).status().message(), "2 bound pointers for 1"));

  const StepBindings no_workspace{.bound = absl::MakeSpan(none, 1), .call = &go};
  EXPECT_TRUE(
      Contains((*plan)->Run(no_workspace).status().message(), "needs a workspace of 256 bytes"));

  void* null_ptr[1] = {nullptr};
  const StepBindings null_bound{.bound = null_ptr, .workspace = workspace.data(), .call = &go};
  EXPECT_TRUE(Contains((*plan)->Run(null_bound).status().message(), "\"y\" is bound to null"));

  const StepBindings no_call{.bound = absl::MakeSpan(none, 1), .workspace = workspace.data()};
  absl::Status st = (*plan)->Run(no_call).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(st.message(), "has Call ops and no call function"));
  EXPECT_EQ(Download(dy), (std::vector<float>{1, 2, 3, 4}));  // refused before any op ran
}

TEST_P(StepTest, AnOpsErrorNamesTheStepAndTheOp) {
  StepDesc desc("failing");
  // 3 heads, not a multiple of the 2 KV heads: the op refuses it.
  const AttentionArgs shape = testing_support::SelfAttention(
      nullptr, nullptr, nullptr, nullptr, nullptr, /*n=*/2, /*heads=*/3, /*kv_heads=*/2,
      /*hd=*/4, 0.5f, /*causal=*/false);
  const StepValueId q = desc.Scratch("q", StepElem::kF32, 2 * 3 * 4);
  const StepValueId kv = desc.Scratch("kv", StepElem::kF32, 2 * 2 * 4);
  desc.Add(step_op::Attention{q, kv, kv, q, kNoStepValue, shape});
  auto plan = b().Plan(desc);
  ASSERT_TRUE(plan.ok()) << plan.status();
  BackendArray<uint8_t> workspace(b());
  ASSERT_TRUE(workspace.Resize((*plan)->workspace_bytes()).ok());
  StepBindings bindings;
  bindings.workspace = workspace.data();
  absl::Status s = (*plan)->Run(bindings).status();
  ASSERT_FALSE(s.ok());
  // The op's own code (the CPU op's InvalidArgument; a kernel's refusal is Internal on CUDA).
  if (b().caps().host_memory) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
  EXPECT_TRUE(Contains(s.message(), "step \"failing\", op 0 (Attention): "));
}

INSTANTIATE_TEST_SUITE_P(All, StepTest, ::testing::ValuesIn(testing_support::AllBackends()),
                         [](const ::testing::TestParamInfo<const Backend*>& info) {
                           return std::string(info.param->name());
                         });

TEST(BackendCaps, SayWhereResultsLiveAndHowWideHeadsMayBe) {
  EXPECT_TRUE(CpuBackend().caps().host_memory);
  const BackendCaps cuda = (*GetCudaBackend())->caps();
  EXPECT_FALSE(cuda.host_memory);
  EXPECT_EQ(cuda.max_head_dim, 256);  // the attention kernels' shared-memory tiles
}

}  // namespace
}  // namespace hap
