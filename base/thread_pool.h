// A fixed pool of worker threads with a blocking ParallelFor, used by CPU ops that are not BLAS.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hap {

class ThreadPool {
 public:
  // n_threads <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n); the calling thread takes part.
  // Returns when every chunk has finished. Not reentrant: fn must not call ParallelFor.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::mutex call_mu_;  // serialises ParallelFor calls from different threads
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

// The process-wide pool used by CPU kernels (created on first use; SetThreads before first use
// to size it).
ThreadPool& DefaultPool();
void SetDefaultPoolThreads(int n_threads);

}  // namespace hap
