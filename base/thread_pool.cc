#include "base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>

namespace hap {

ThreadPool::ThreadPool(int n_threads, int spin_us) : spin_(std::max(0, spin_us)) {
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

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls pred, pausing between polls, for up to `budget`; whether it came true.
template <typename Pred>
bool SpinFor(std::chrono::microseconds budget, Pred pred) {
  if (budget.count() <= 0) return pred();
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      if (pred()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return pred();
  }
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
  if (SpinFor(spin_, [this] { return pending_.load(std::memory_order_acquire) == 0; })) return;
  std::unique_lock<std::mutex> lock(mu_);
  caller_sleeping_ = true;
  done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  caller_sleeping_ = false;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const bool fresh = SpinFor(spin_, [&] {
      return stop_.load(std::memory_order_relaxed) ||
             generation_.load(std::memory_order_acquire) != seen;
    });
    if (stop_.load()) return;
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
std::atomic<int> g_default_spin_us{ThreadPool::kDefaultSpinUs};
}  // namespace

void SetDefaultPoolThreads(int n_threads, int spin_us) {
  g_default_threads = n_threads;
  g_default_spin_us = spin_us;
}

ThreadPool& DefaultPool() {
  static ThreadPool* pool = new ThreadPool(g_default_threads.load(), g_default_spin_us.load());
  return *pool;
}

}  // namespace hap
