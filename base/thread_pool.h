// A fixed pool of worker threads with a blocking ParallelFor, used by CPU ops that are not BLAS.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hap {

class ThreadPool {
 public:
  // Microseconds a hand-over spins before sleeping (see ParallelFor): about 50 µs spans the gaps
  // between the kernels of a decode step (mid-size model: 26 -> 42 tokens/s against sleeping at
  // once). Where several compute processes share few cores, spinning takes cores from the
  // others; they do better with less (docs/design.md §6).
  static constexpr int kDefaultSpinUs = 50;

  // n_threads <= 0 means std::thread::hardware_concurrency(); spin_us <= 0: sleep at once.
  explicit ThreadPool(int n_threads, int spin_us = kDefaultSpinUs);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n); the calling thread takes part.
  // Returns when every chunk has finished. Not reentrant: fn must not call ParallelFor.
  // Hand-overs spin for up to spin_us before sleeping (workers waiting for the next call, the
  // caller waiting for the workers): a decode step makes hundreds of calls a few microseconds
  // apart, and a futex sleep and wake-up per call cost more than the work of many of them.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;       // guards the sleep/wake hand-over (sleepers_, caller_sleeping_)
  std::mutex call_mu_;  // serialises ParallelFor calls from different threads
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  // The call in progress: written by the caller before it bumps generation_ (release), read by
  // the workers after they see the new generation (acquire).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // workers not yet done with this generation
  std::atomic<bool> stop_{false};
  const std::chrono::microseconds spin_;
  int sleepers_ = 0;              // workers blocked on work_cv_
  bool caller_sleeping_ = false;  // the caller blocked on done_cv_
};

// The process-wide pool used by CPU kernels (created on first use; SetDefaultPoolThreads before
// first use to size it and set its spin).
ThreadPool& DefaultPool();
void SetDefaultPoolThreads(int n_threads, int spin_us = ThreadPool::kDefaultSpinUs);

}  // namespace hap
