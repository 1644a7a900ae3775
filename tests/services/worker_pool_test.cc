// WorkerPool's admission: a task that releases its place before answering lets the next call
// in at once (a client that saw the answer must not find the server busy), and the counts stay
// consistent whichever way the ticket is released.
#include "services/server/worker_pool.h"

#include <chrono>
#include <future>
#include <thread>

#include "gtest/gtest.h"

namespace hap::svc {
namespace {

TEST(WorkerPool, ATaskThatReleasesItsPlaceLetsTheNextCallInBeforeItReturns) {
  WorkerPool pool(/*workers=*/1, /*queue_length=*/0);
  auto first = pool.Admit();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(pool.Admit().status().code(), absl::StatusCode::kResourceExhausted);  // full
  std::promise<void> done;
  pool.Run(std::move(*first), [&](WorkerPool::Ticket* place) {
    EXPECT_EQ(pool.running(), 1);
    EXPECT_EQ(pool.admitted(), 1);
    place->Reset();  // as the services do before they answer
    EXPECT_EQ(pool.running(), 0);
    EXPECT_EQ(pool.admitted(), 0);
    EXPECT_EQ(pool.queued(), 0);
    auto next = pool.Admit();  // still inside the task
    EXPECT_TRUE(next.ok()) << next.status();
    done.set_value();
  });
  done.get_future().wait();
}

TEST(WorkerPool, ATicketKeptByItsTaskIsReleasedWhenTheTaskReturns) {
  WorkerPool pool(1, 1);
  auto t = pool.Admit();
  ASSERT_TRUE(t.ok());
  std::promise<void> ran;
  pool.Run(std::move(*t), [&](WorkerPool::Ticket*) {
    EXPECT_EQ(pool.running(), 1);
    ran.set_value();
  });
  ran.get_future().wait();
  for (int i = 0; i < 2000 && pool.admitted() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(pool.admitted(), 0);
  EXPECT_EQ(pool.running(), 0);
  EXPECT_EQ(pool.queued(), 0);
  EXPECT_EQ(pool.rejected(), 0);
}

}  // namespace
}  // namespace hap::svc
