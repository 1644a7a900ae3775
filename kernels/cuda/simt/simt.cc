// The SIMT emulation's scheduler: one fiber per CUDA thread of a block, run one at a time in a
// random order between synchronisation points (kernels/cuda/simt/simt.h). On x86-64 a fiber
// switch is a few register moves (SwitchContext below); glibc's swapcontext also saves the
// signal mask with a system call per switch, which made it most of the emulation's time.
// Elsewhere the portable ucontext calls do the same job.
#include "kernels/cuda/simt/simt.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "base/thread_pool.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAP_SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAP_SIMT_ASAN 1
#endif
#endif

#if defined(HAP_SIMT_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace hap::simt {
namespace {

std::string ToHex(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// Kernels keep little on their stacks; AddressSanitizer's redzones make frames several times
// larger.
#if defined(HAP_SIMT_ASAN)
constexpr size_t kStackBytes = 256 * 1024;
#else
constexpr size_t kStackBytes = 64 * 1024;
#endif

#if defined(__x86_64__)
// Saves the callee-saved registers, MXCSR and the x87 control word on the current stack, stores
// the stack pointer in *save_sp, loads load_sp and restores the same from there.
extern "C" void hap_simt_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl hap_simt_switch
  .type hap_simt_switch, @function
hap_simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size hap_simt_switch, .-hap_simt_switch
  .section .note.GNU-stack, "", @progbits
  .text
)");

struct Context {
  void* sp = nullptr;
};

// A context that starts `entry` (which must never return) at the top of the stack.
void MakeContext(Context* c, char* stack_bottom, size_t stack_bytes, void (*entry)()) {
  const uintptr_t top = (reinterpret_cast<uintptr_t>(stack_bottom) + stack_bytes) & ~uintptr_t{15};
  auto* sp = reinterpret_cast<uint64_t*>(top);
  *--sp = 0;                                 // entry's return address: none
  *--sp = reinterpret_cast<uint64_t>(entry);  // hap_simt_switch's ret lands here, rsp ≡ 8 mod 16
  for (int i = 0; i < 6; ++i) *--sp = 0;     // rbp, rbx, r12–r15
  uint32_t mxcsr = 0;
  uint16_t fpu_cw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpu_cw));
  *--sp = uint64_t{mxcsr} | (uint64_t{fpu_cw} << 32);
  c->sp = sp;
}

void SwitchContext(Context* from, Context* to) { hap_simt_switch(&from->sp, to->sp); }
#else
struct Context {
  ucontext_t uc;
};

void MakeContext(Context* c, char* stack_bottom, size_t stack_bytes, void (*entry)()) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack_bottom;
  c->uc.uc_stack.ss_size = stack_bytes;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, entry, 0);
}

void SwitchContext(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
#endif

std::atomic<uint64_t> g_seed{[] {
  const char* env = std::getenv("HAP_SIMT_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : uint64_t{0x5eed};
}()};
std::atomic<uint64_t> g_launches{0};
std::mutex g_names_mu;
std::map<std::string, uint64_t>& LaunchesByName() {
  static auto* launches = new std::map<std::string, uint64_t>();
  return *launches;
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A fiber's stack: mmap'ed with an inaccessible page below it, so an overflow faults at once.
class Stack {
 public:
  Stack() {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    mapped_ = kStackBytes + page;
    void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "simt: cannot map a %zu-byte fiber stack\n", mapped_);
      std::abort();
    }
    mprotect(p, page, PROT_NONE);
    base_ = static_cast<char*>(p);
    bottom_ = base_ + page;
  }
  ~Stack() { munmap(base_, mapped_); }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;

  char* bottom() const { return bottom_; }

 private:
  char* base_ = nullptr;
  char* bottom_ = nullptr;
  size_t mapped_ = 0;
};

enum class FiberState { kRunnable, kBarrier, kWarp, kDone };

struct Fiber {
  Context context;
  ThreadContext thread;
  FiberState state = FiberState::kRunnable;
  int linear = 0;  // x + y·bx + z·bx·by
  size_t shared_cursor = 0;
  uint64_t exchange[kWarpSize];  // the lanes' values of this fiber's last warp op
  void* fake_stack = nullptr;    // AddressSanitizer's fake stack while switched out
};

// A warp op some lanes have reached and others not yet.
struct PendingWarpOp {
  unsigned mask = 0;
  unsigned arrived = 0;
  uint64_t slots[kWarpSize];
};

// One OS thread's block runner: its fibers' stacks and the shared memory of the block it runs.
class BlockRunner {
 public:
  // Runs block `block_idx` of the launch; returns "" or the fault.
  std::string Run(const char* name, dim3 grid, dim3 block, dim3 block_idx, size_t dynamic_smem,
                  const std::function<void()>& kernel, uint64_t seed);

  void SyncThreads();
  const uint64_t* WarpExchange(unsigned mask, uint64_t value);
  void* SharedArray(size_t bytes, size_t align);
  void* DynamicShared() { return dynamic_.data(); }
  [[noreturn]] void Fault(const std::string& message);
  Fiber& current() { return *current_; }

  static void FiberEntry();

 private:
  void SwitchToScheduler();  // from the running fiber
  void SwitchTo(Fiber& f);   // from the scheduler
  void MakeRunnable(int linear);
  std::string DescribeDeadlock() const;

  std::vector<std::unique_ptr<Stack>> stacks_;
  std::vector<Fiber> fibers_;
  std::vector<int> runnable_;
  std::vector<std::vector<PendingWarpOp>> warps_;  // pending ops per warp
  int n_threads_ = 0;
  int at_barrier_ = 0;
  Fiber* current_ = nullptr;
  Context scheduler_;
  const void* scheduler_stack_bottom_ = nullptr;
  size_t scheduler_stack_size_ = 0;
  const std::function<void()>* kernel_ = nullptr;
  std::vector<unsigned char> shared_;  // static shared arrays (HAP_SHARED)
  size_t shared_filled_ = 0;           // bytes of shared_ filled with 0xFF for this block
  std::vector<unsigned char> dynamic_;
  std::string fault_;
  bool abandoned_ = false;  // a fault left fibers mid-kernel: their stacks hold stale frames
  const char* name_ = "";
};

thread_local BlockRunner* tls_runner = nullptr;

BlockRunner& Runner() {
  if (tls_runner == nullptr) {
    std::fprintf(stderr, "simt: a device intrinsic was called outside a kernel launch\n");
    std::abort();
  }
  return *tls_runner;
}

void BlockRunner::SwitchTo(Fiber& f) {
  current_ = &f;
#if defined(HAP_SIMT_ASAN)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, stacks_[f.linear]->bottom(), kStackBytes);
  SwitchContext(&scheduler_, &f.context);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  SwitchContext(&scheduler_, &f.context);
#endif
  current_ = nullptr;
}

void BlockRunner::SwitchToScheduler() {
  Fiber& f = *current_;
#if defined(HAP_SIMT_ASAN)
  // A finished fiber never resumes: no fake stack to keep.
  __sanitizer_start_switch_fiber(f.state == FiberState::kDone ? nullptr : &f.fake_stack,
                                 scheduler_stack_bottom_, scheduler_stack_size_);
  SwitchContext(&f.context, &scheduler_);
  __sanitizer_finish_switch_fiber(f.fake_stack, nullptr, nullptr);
#else
  SwitchContext(&f.context, &scheduler_);
#endif
}

// Thrown by Fault to unwind the faulting thread's stack (destroying its temporaries) back to
// FiberEntry; never crosses a fiber boundary.
struct FiberAbort {};

void BlockRunner::FiberEntry() {
  BlockRunner& r = Runner();
#if defined(HAP_SIMT_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &r.scheduler_stack_bottom_, &r.scheduler_stack_size_);
#endif
  try {
    (*r.kernel_)();
  } catch (const FiberAbort&) {
    // Fault recorded the message; the scheduler abandons the block.
  }
  r.current_->state = FiberState::kDone;
  r.SwitchToScheduler();
  std::abort();  // a finished fiber is never resumed
}

void BlockRunner::MakeRunnable(int linear) {
  fibers_[linear].state = FiberState::kRunnable;
  runnable_.push_back(linear);
}

void BlockRunner::Fault(const std::string& message) {
  if (fault_.empty()) {
    const Fiber& f = *current_;
    fault_ = std::string(name_) + ": thread (" + std::to_string(f.thread.thread_idx.x) + "," +
             std::to_string(f.thread.thread_idx.y) + "," + std::to_string(f.thread.thread_idx.z) +
             ") of block (" + std::to_string(f.thread.block_idx.x) + "," +
             std::to_string(f.thread.block_idx.y) + "," + std::to_string(f.thread.block_idx.z) +
             "): " + message;
  }
  throw FiberAbort{};
}

void BlockRunner::SyncThreads() {
  current_->state = FiberState::kBarrier;
  ++at_barrier_;
  SwitchToScheduler();
}

const uint64_t* BlockRunner::WarpExchange(unsigned mask, uint64_t value) {
  Fiber& f = *current_;
  const int lane = f.linear % kWarpSize;
  const int warp = f.linear / kWarpSize;
  if (!(mask >> lane & 1u)) {
    Fault("lane " + std::to_string(lane) + " calls a warp op whose mask 0x" +
          ToHex(mask) + " does not contain it");
  }
  const int lanes_here = std::min(kWarpSize, n_threads_ - warp * kWarpSize);
  const unsigned existing = lanes_here == kWarpSize ? ~0u : (1u << lanes_here) - 1u;
  if (mask & ~existing) {
    Fault("warp op mask 0x" + ToHex(mask) + " names lanes that warp " + std::to_string(warp) +
          " of a " + std::to_string(n_threads_) + "-thread block does not have");
  }
  std::vector<PendingWarpOp>& pending = warps_[warp];
  PendingWarpOp* op = nullptr;
  for (PendingWarpOp& p : pending) {
    if (p.mask == mask) {
      op = &p;
    } else if (p.mask & mask) {
      Fault("lanes of warp " + std::to_string(warp) + " wait in warp ops with overlapping masks 0x" +
            ToHex(p.mask) + " and 0x" + ToHex(mask));
    }
  }
  if (op == nullptr) {
    pending.push_back(PendingWarpOp{mask, 0, {}});
    op = &pending.back();
  }
  op->slots[lane] = value;
  op->arrived |= 1u << lane;
  if (op->arrived != mask) {
    f.state = FiberState::kWarp;
    SwitchToScheduler();
    return f.exchange;
  }
  // The last lane to arrive completes the op: every lane gets the values, the others wake.
  for (int l = 0; l < kWarpSize; ++l) {
    if (!(mask >> l & 1u)) continue;
    Fiber& member = fibers_[warp * kWarpSize + l];
    std::memcpy(member.exchange, op->slots, sizeof(op->slots));
    if (&member != &f) MakeRunnable(member.linear);
  }
  pending.erase(pending.begin() + (op - pending.data()));
  return f.exchange;
}

void* BlockRunner::SharedArray(size_t bytes, size_t align) {
  Fiber& f = *current_;
  const size_t offset = (f.shared_cursor + align - 1) / align * align;
  if (offset + bytes + dynamic_.size() > kMaxSharedBytesPerBlock) {
    Fault("shared memory of " + std::to_string(offset + bytes) + " static + " +
          std::to_string(dynamic_.size()) + " dynamic bytes exceeds the block limit of " +
          std::to_string(kMaxSharedBytesPerBlock));
  }
  f.shared_cursor = offset + bytes;
  if (f.shared_cursor > shared_filled_) {
    std::memset(shared_.data() + shared_filled_, 0xFF, f.shared_cursor - shared_filled_);
    shared_filled_ = f.shared_cursor;
  }
  return shared_.data() + offset;
}

std::string BlockRunner::DescribeDeadlock() const {
  std::string out = std::string(name_) + ": deadlock in block; ";
  for (size_t w = 0; w < warps_.size(); ++w) {
    for (const PendingWarpOp& p : warps_[w]) {
      out += "warp " + std::to_string(w) + " op with mask 0x" + ToHex(p.mask) +
             " has only lanes 0x" + ToHex(p.arrived) + "; ";
    }
  }
  out += std::to_string(at_barrier_) + " threads wait at __syncthreads";
  return out;
}

std::string BlockRunner::Run(const char* name, dim3 grid, dim3 block, dim3 block_idx,
                             size_t dynamic_smem, const std::function<void()>& kernel,
                             uint64_t seed) {
  name_ = name;
  kernel_ = &kernel;
  fault_.clear();
  n_threads_ = static_cast<int>(block.x * block.y * block.z);
  while (static_cast<int>(stacks_.size()) < n_threads_) stacks_.push_back(std::make_unique<Stack>());
  fibers_.resize(n_threads_);
  warps_.assign((n_threads_ + kWarpSize - 1) / kWarpSize, {});
  at_barrier_ = 0;
  if (shared_.size() < kMaxSharedBytesPerBlock) shared_.resize(kMaxSharedBytesPerBlock);
  std::memset(shared_.data(), 0xFF, shared_filled_);
  dynamic_.assign(dynamic_smem, 0xFF);

#if defined(HAP_SIMT_ASAN)
  if (abandoned_) {
    for (auto& s : stacks_) __asan_unpoison_memory_region(s->bottom(), kStackBytes);
    abandoned_ = false;
  }
#endif
  runnable_.clear();
  for (int t = 0; t < n_threads_; ++t) {
    Fiber& f = fibers_[t];
    f.linear = t;
    f.state = FiberState::kRunnable;
    f.shared_cursor = 0;
    f.fake_stack = nullptr;
    f.thread.thread_idx = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
    f.thread.block_idx = block_idx;
    f.thread.block_dim = block;
    f.thread.grid_dim = grid;
    MakeContext(&f.context, stacks_[t]->bottom(), kStackBytes, &BlockRunner::FiberEntry);
    runnable_.push_back(t);
  }

  std::mt19937_64 rng(seed);
  int done = 0;
  while (done < n_threads_ && fault_.empty()) {
    if (runnable_.empty()) {
      bool warp_waiting = false;
      for (const auto& w : warps_) warp_waiting |= !w.empty();
      if (warp_waiting || at_barrier_ == 0) {
        fault_ = DescribeDeadlock();
        break;
      }
      // Every thread still running is at the barrier: release them all.
      for (Fiber& f : fibers_) {
        if (f.state == FiberState::kBarrier) MakeRunnable(f.linear);
      }
      at_barrier_ = 0;
    }
    const size_t pick = rng() % runnable_.size();
    const int t = runnable_[pick];
    runnable_[pick] = runnable_.back();
    runnable_.pop_back();
    SwitchTo(fibers_[t]);
    if (fibers_[t].state == FiberState::kDone) ++done;
  }
  kernel_ = nullptr;
  abandoned_ = !fault_.empty();
  return fault_;
}

}  // namespace

const ThreadContext& Current() { return Runner().current().thread; }
void SyncThreads() { Runner().SyncThreads(); }
const uint64_t* WarpExchange(unsigned mask, uint64_t value) {
  return Runner().WarpExchange(mask, value);
}
int LaneId() { return Runner().current().linear % kWarpSize; }
void* SharedArray(size_t bytes, size_t align) { return Runner().SharedArray(bytes, align); }
void* DynamicShared() { return Runner().DynamicShared(); }
void Fault(const std::string& message) { Runner().Fault(message); }
uint64_t LaunchCount() { return g_launches.load(); }

uint64_t LaunchCount(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_names_mu);
  auto it = LaunchesByName().find(name);
  return it == LaunchesByName().end() ? 0 : it->second;
}

void SetSeed(uint64_t seed) { g_seed.store(seed); }

std::string Launch(const char* name, dim3 grid, dim3 block, size_t dynamic_smem,
                   const std::function<void()>& kernel) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock || block.z > 64) {
    return std::string(name) + ": invalid block (" + std::to_string(block.x) + "," +
           std::to_string(block.y) + "," + std::to_string(block.z) + ")";
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
    return std::string(name) + ": invalid grid (" + std::to_string(grid.x) + "," +
           std::to_string(grid.y) + "," + std::to_string(grid.z) + ")";
  }
  if (dynamic_smem > kMaxSharedBytesPerBlock) {
    return std::string(name) + ": " + std::to_string(dynamic_smem) +
           " bytes of dynamic shared memory exceed the block limit of " +
           std::to_string(kMaxSharedBytesPerBlock);
  }
  if (tls_runner != nullptr) return std::string(name) + ": launched from inside a kernel";
  {
    std::lock_guard<std::mutex> lock(g_names_mu);
    ++LaunchesByName()[name];
  }
  const uint64_t seed = SplitMix(g_seed.load() ^ SplitMix(g_launches.fetch_add(1)));
  const int64_t n_blocks = int64_t{grid.x} * grid.y * grid.z;
  std::mutex mu;
  std::string fault;
  std::atomic<bool> failed{false};
  DefaultPool().ParallelFor(n_blocks, [&](int64_t begin, int64_t end) {
    thread_local BlockRunner runner;
    for (int64_t b = begin; b < end && !failed.load(std::memory_order_relaxed); ++b) {
      const dim3 idx(static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                     static_cast<unsigned>(b / (int64_t{grid.x} * grid.y)));
      tls_runner = &runner;
      std::string f = runner.Run(name, grid, block, idx, dynamic_smem, kernel,
                                 SplitMix(seed ^ static_cast<uint64_t>(b)));
      tls_runner = nullptr;
      if (!f.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        if (fault.empty()) fault = std::move(f);
        failed.store(true);
      }
    }
  });
  return fault;
}

}  // namespace hap::simt
