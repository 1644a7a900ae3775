// ThreadPool: every index handed out exactly once per call, on both hand-over paths (workers
// still spinning from the previous call, and workers asleep after a pause), under calls from
// several threads at once, and with fewer items than threads.
#include "base/thread_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace hap {
namespace {

// Runs one ParallelFor over n items and checks each was visited once, by chunks that tile
// [0, n) without overlap.
void CoverOnce(ThreadPool& pool, int64_t n) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int> chunks{0};
  pool.ParallelFor(n, [&](int64_t begin, int64_t end) {
    ASSERT_LT(begin, end);
    chunks.fetch_add(1);
    for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "item " << i;
  EXPECT_LE(chunks.load(), pool.size());
}

TEST(ThreadPool, BackToBackCallsCoverEveryItemOnce) {
  for (int spin_us : {0, ThreadPool::kDefaultSpinUs}) {
    for (int threads : {1, 2, 4}) {
      ThreadPool pool(threads, spin_us);
      EXPECT_EQ(pool.size(), threads);
      for (int call = 0; call < 2000; ++call) CoverOnce(pool, 1 + call % 37);
    }
  }
}

TEST(ThreadPool, CallsAfterThePoolFellAsleepStillRun) {
  ThreadPool pool(3);
  for (int call = 0; call < 5; ++call) {
    CoverOnce(pool, 100);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin: workers sleep
  }
}

TEST(ThreadPool, FewerItemsThanThreads) {
  ThreadPool pool(4);
  CoverOnce(pool, 1);
  CoverOnce(pool, 2);
  CoverOnce(pool, 3);
  int calls = 0;
  pool.ParallelFor(0, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPool, ConcurrentCallersAreSerialisedAndComplete) {
  ThreadPool pool(2, /*spin_us=*/5);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int call = 0; call < 300; ++call) {
        pool.ParallelFor(50, [&](int64_t begin, int64_t end) { total.fetch_add(end - begin); });
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), int64_t{4} * 300 * 50);
}

TEST(ThreadPool, WorkersSeeTheCallersWrites) {
  ThreadPool pool(2);
  std::vector<int> data(1000);
  for (int round = 1; round <= 200; ++round) {
    for (int& v : data) v = round;  // plain writes before the call
    std::atomic<int> wrong{0};
    pool.ParallelFor(static_cast<int64_t>(data.size()), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        if (data[static_cast<size_t>(i)] != round) wrong.fetch_add(1);
        data[static_cast<size_t>(i)] = -round;  // plain writes the caller reads after
      }
    });
    ASSERT_EQ(wrong.load(), 0);
    for (int v : data) ASSERT_EQ(v, -round);
  }
}

}  // namespace
}  // namespace hap
