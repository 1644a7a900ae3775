#include "base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>

namespace hap {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {

// About 30-60 µs of spinning at each hand-over before blocking: long enough to span the gaps
// between the kernels of one decode step, short enough that an idle pool costs nothing.
constexpr int kSpinIterations = 2048;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int parts = size();
  if (parts == 1 || n == 1) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  fn_ = &fn;
  n_ = n;
  chunk_ = (n + parts - 1) / parts;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
    if (sleepers_ > 0) work_cv_.notify_all();
  }
  fn(0, std::min(chunk_, n));  // chunk 0 runs on the caller
  for (int i = 0; i < kSpinIterations; ++i) {
    if (pending_.load(std::memory_order_acquire) == 0) return;
    CpuRelax();
  }
  std::unique_lock<std::mutex> lock(mu_);
  caller_sleeping_ = true;
  done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  caller_sleeping_ = false;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    bool fresh = false;
    for (int i = 0; i < kSpinIterations && !fresh; ++i) {
      if (stop_.load(std::memory_order_relaxed)) return;
      fresh = generation_.load(std::memory_order_acquire) != seen;
      if (!fresh) CpuRelax();
    }
    if (!fresh) {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleepers_;
      work_cv_.wait(lock, [&] {
        return stop_.load() || generation_.load(std::memory_order_acquire) != seen;
      });
      --sleepers_;
      if (stop_.load()) return;
    }
    // The caller cannot start another generation before this worker reports this one done.
    seen = generation_.load(std::memory_order_acquire);
    const int64_t begin = std::min(n_, chunk_ * index);
    const int64_t end = std::min(n_, begin + chunk_);
    if (begin < end) (*fn_)(begin, end);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      if (caller_sleeping_) done_cv_.notify_one();
    }
  }
}

namespace {
std::atomic<int> g_default_threads{0};
}

void SetDefaultPoolThreads(int n_threads) { g_default_threads = n_threads; }

ThreadPool& DefaultPool() {
  static ThreadPool* pool = new ThreadPool(g_default_threads.load());
  return *pool;
}

}  // namespace hap
