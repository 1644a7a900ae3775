// Backend::Capture on the CUDA backend executed by the SIMT emulation: a capture runs nothing;
// each replay runs the recorded ops again on whatever the inputs hold then (a host upload's
// page-locked source included) and gives, bit for bit, what the ops give called one by one, with
// one launch per recorded kernel and nothing else; ops that would wait for the device, allocate,
// or upload from pageable memory are refused while capturing and leave the backend usable; the
// CPU backend, which runs ops as they are called, has no capture.
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/emulation_counts.h"
#include "tests/kernels/attention_args.h"

namespace hap {
namespace {

const Backend& Cuda() {
  static const Backend* backend = *GetCudaBackend();
  return *backend;
}

// A small step: h = RmsNorm(x); y = h·Wᵀ; y += x (rows of width d, W [d, d]), with x uploaded
// first from a page-locked host buffer.
struct Step {
  static constexpr int kRows = 5, kD = 32;
  explicit Step(const Backend& b)
      : b(b),
        host_x(*BackendBuffer::AllocateHost(b, sizeof(float) * kRows * kD)),
        x(b),
        h(b),
        y(b),
        norm(b),
        w_storage(b) {
    EXPECT_TRUE(x.Resize(kRows * kD).ok());
    EXPECT_TRUE(h.Resize(kRows * kD).ok());
    EXPECT_TRUE(y.Resize(kRows * kD).ok());
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> g(kD), w(kD * kD);
    for (float& v : g) v = 1.f + 0.1f * u(rng);
    for (float& v : w) v = u(rng);
    EXPECT_TRUE(norm.Assign(g.data(), g.size()).ok());
    EXPECT_TRUE(w_storage.Assign(w.data(), w.size()).ok());
    weight = TensorView{w_storage.data(), DType::kF32, b.device(), {kD, kD}};
    SetInput(0);
  }
  // Fills the page-locked input with values drawn from `seed`.
  void SetInput(int seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    auto* v = static_cast<float*>(host_x.data());
    for (int i = 0; i < kRows * kD; ++i) v[i] = u(rng);
  }
  absl::Status Enqueue() const {
    if (absl::Status s = b.CopyToBackend(x.data(), host_x.data(), sizeof(float) * kRows * kD);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = b.RmsNorm(x.data(), norm.data(), h.data(), kRows, kD, 1e-5f); !s.ok()) {
      return s;
    }
    if (absl::Status s =
            b.Linear(h.data(), weight, nullptr, y.data(), kRows, LinearRows::kIndependent);
        !s.ok()) {
      return s;
    }
    return b.Add(y.data(), x.data(), int64_t{kRows} * kD);
  }
  std::vector<float> Output() const {
    std::vector<float> out(kRows * kD);
    EXPECT_TRUE(y.CopyTo(out.data()).ok());
    return out;
  }

  const Backend& b;
  BackendBuffer host_x;
  BackendArray<float> x, h, y, norm, w_storage;
  TensorView weight;
};

TEST(BackendGraph, ACaptureRunsNothingAndEachReplayEqualsTheOpsCalledOneByOne) {
  Step step(Cuda());
  ASSERT_TRUE(step.Enqueue().ok());
  const std::vector<float> direct_0 = step.Output();
  step.SetInput(1);
  ASSERT_TRUE(step.Enqueue().ok());
  const std::vector<float> direct_1 = step.Output();
  ASSERT_NE(direct_0, direct_1);

  // The capture leaves y as the last direct run left it.
  const int64_t launches = cuda::emulation::KernelLaunches();
  const int64_t products = cuda::emulation::Products();
  step.SetInput(0);
  absl::StatusOr<std::unique_ptr<BackendGraph>> graph =
      Cuda().Capture([&] { return step.Enqueue(); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(cuda::emulation::KernelLaunches(), launches);
  EXPECT_EQ(cuda::emulation::Products(), products);
  EXPECT_EQ(step.Output(), direct_1);

  // Each replay reads the page-locked input as it is then.
  ASSERT_TRUE((*graph)->Replay().ok());
  EXPECT_EQ(step.Output(), direct_0);
  const int64_t per_replay = cuda::emulation::KernelLaunches() - launches;
  EXPECT_GE(per_replay, 2);  // the norm and the add at least
  EXPECT_EQ(cuda::emulation::Products() - products, 1);
  step.SetInput(1);
  ASSERT_TRUE((*graph)->Replay().ok());
  EXPECT_EQ(step.Output(), direct_1);
  EXPECT_EQ(cuda::emulation::KernelLaunches() - launches, 2 * per_replay);
}

TEST(BackendGraph, WaitsAllocationsAndPageableUploadsAreRefusedWhileCapturing) {
  const Backend& b = Cuda();
  BackendArray<float> dev(b);
  ASSERT_TRUE(dev.Resize(16).ok());
  std::vector<float> pageable(16, 1.f);
  struct Case {
    const char* what;
    std::function<absl::Status()> op;
  } cases[] = {
      {"a copy to the host",
       [&] { return b.CopyToHost(pageable.data(), dev.data(), sizeof(float) * 16); }},
      {"an upload from pageable memory",
       [&] { return b.CopyToBackend(dev.data(), pageable.data(), sizeof(float) * 16); }},
      {"an allocation", [&] { return b.Allocate(256).status(); }},
      {"a synchronisation", [&] { return b.Synchronize(); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    absl::StatusOr<std::unique_ptr<BackendGraph>> graph = b.Capture(c.op);
    ASSERT_FALSE(graph.ok());
    EXPECT_EQ(graph.status().code(), absl::StatusCode::kFailedPrecondition) << graph.status();
    // The backend is not left capturing: ops run again at once.
    ASSERT_TRUE(b.CopyToBackend(dev.data(), pageable.data(), sizeof(float) * 16).ok());
    std::vector<float> back(16, 0.f);
    ASSERT_TRUE(b.CopyToHost(back.data(), dev.data(), sizeof(float) * 16).ok());
    EXPECT_EQ(back, pageable);
  }
}

// A graph whose op takes its workspace from the thread's scratch area (the narrow attention path:
// BF16 operands, head_dim 24) replays on that thread until an op there needs more scratch and
// moves it; then, and on any other thread, the replay is refused instead of writing freed memory.
TEST(BackendGraph, AReplayIsRefusedOnAnotherThreadAndOnceTheScratchMoved) {
  const Backend& b = Cuda();
  constexpr int kRows = 8, kHeads = 2, kHd = 24;
  std::vector<float> host(kRows * kHeads * kHd);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.01f * static_cast<float>(i % 37);
  BackendArray<float> q(b), k(b), v(b), out(b);
  for (BackendArray<float>* a : {&q, &k, &v, &out})
    ASSERT_TRUE(a->Assign(host.data(), host.size()).ok());
  AttentionArgs a =
      testing_support::SelfAttention(q.data(), k.data(), v.data(), out.data(), /*lse=*/nullptr,
                                     kRows, kHeads, kHeads, kHd, 0.2f, /*causal=*/true);
  a.operands = DType::kBF16;
  ASSERT_TRUE(b.Attention(a).ok());  // the scratch grows to what the op needs, before the capture
  absl::StatusOr<std::unique_ptr<BackendGraph>> graph = b.Capture([&] { return b.Attention(a); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE((*graph)->Replay().ok());

  absl::Status elsewhere;
  std::thread([&] { elsewhere = (*graph)->Replay(); }).join();
  EXPECT_EQ(elsewhere.code(), absl::StatusCode::kFailedPrecondition) << elsewhere;

  // A gather with a long host index list grows this thread's scratch.
  BackendArray<float> rows(b), gathered(b);
  ASSERT_TRUE(rows.Assign(host.data(), 4).ok());
  std::vector<int> idx(300000, 1);
  ASSERT_TRUE(gathered.Resize(idx.size()).ok());
  ASSERT_TRUE(b.GatherRows(rows.data(), 4, sizeof(float), idx.data(),
                           static_cast<int64_t>(idx.size()), gathered.data())
                  .ok());
  const absl::Status stale = (*graph)->Replay();
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition) << stale;
}

TEST(BackendGraph, NothingToCaptureAndTheCpuBackend) {
  absl::StatusOr<std::unique_ptr<BackendGraph>> empty =
      Cuda().Capture([] { return absl::OkStatus(); });
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<BackendGraph>> cpu =
      CpuBackend().Capture([] { return absl::OkStatus(); });
  ASSERT_FALSE(cpu.ok());
  EXPECT_EQ(cpu.status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace hap
