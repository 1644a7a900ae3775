// ComputeGate: turns in arrival order, a yield hands the turn to exactly the callers waiting at
// that moment, the bound on started callers, and TurnBudget's slicing by work done.
#include "base/compute_gate.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace hap {
namespace {

using std::chrono::milliseconds;

// Waits (bounded) until `pred` holds; false on timeout.
template <typename Pred>
bool WaitFor(Pred pred) {
  for (int i = 0; i < 2000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return pred();
}

// An ordered record of what the threads did while holding the gate.
class Log {
 public:
  void Add(const std::string& s) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(s);
  }
  std::vector<std::string> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> events_;
};

TEST(ComputeGate, TurnsGoInArrivalOrderWithoutYields) {
  ComputeGate gate;
  Log log;
  std::vector<std::thread> threads;
  {
    ComputeGate::Hold first = gate.Enter();
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([&, i] {
        ComputeGate::Hold h = gate.Enter();
        log.Add(absl::StrCat("t", i));
      });
      // Each thread is queued before the next starts, so arrival order is known.
      ASSERT_TRUE(WaitFor([&] { return gate.waiting_turns() == i + 1; }));
    }
    EXPECT_EQ(gate.started(), 5);
    log.Add("first");
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(log.events(), (std::vector<std::string>{"first", "t0", "t1", "t2", "t3"}));
  EXPECT_EQ(gate.started(), 0);
  EXPECT_EQ(gate.waiting_turns(), 0);
}

TEST(ComputeGate, YieldWithNobodyWaitingReturnsAtOnce) {
  ComputeGate gate;
  ComputeGate::Hold h = gate.Enter();
  EXPECT_FALSE(h.Yield());
  EXPECT_FALSE(h.Yield());
}

TEST(ComputeGate, YieldLetsEveryWaiterRunOnceThenResumes) {
  ComputeGate gate;
  Log log;
  std::vector<std::thread> threads;
  ComputeGate::Hold long_one = gate.Enter();
  log.Add("long slice 1");
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      ComputeGate::Hold h = gate.Enter();
      log.Add(absl::StrCat("short ", i));
    });
    ASSERT_TRUE(WaitFor([&] { return gate.waiting_turns() == i + 1; }));
  }
  EXPECT_TRUE(long_one.Yield());  // returns after all three ran
  log.Add("long slice 2");
  EXPECT_FALSE(long_one.Yield());  // nobody left
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(log.events(), (std::vector<std::string>{"long slice 1", "short 0", "short 1",
                                                    "short 2", "long slice 2"}));
}

TEST(ComputeGate, TwoYieldingHoldersAlternate) {
  ComputeGate gate;
  Log log;
  ComputeGate::Hold a = gate.Enter();
  std::thread tb([&] {
    ComputeGate::Hold b = gate.Enter();
    for (int i = 0; i < 3; ++i) {
      log.Add(absl::StrCat("b", i));
      b.Yield();
    }
  });
  ASSERT_TRUE(WaitFor([&] { return gate.waiting_turns() == 1; }));
  for (int i = 0; i < 3; ++i) {
    log.Add(absl::StrCat("a", i));
    a.Yield();
  }
  // a releases; b finishes its slices.
  { ComputeGate::Hold done = std::move(a); }
  tb.join();
  EXPECT_EQ(log.events(),
            (std::vector<std::string>{"a0", "b0", "a1", "b1", "a2", "b2"}));
}

TEST(ComputeGate, StartedBoundHoldsNewcomersOutOfTheRotation) {
  ComputeGate gate(/*max_started=*/2);
  Log log;
  ComputeGate::Hold a = gate.Enter();
  std::thread tb([&] {
    ComputeGate::Hold b = gate.Enter();
    log.Add("b");
  });
  ASSERT_TRUE(WaitFor([&] { return gate.started() == 2; }));
  std::thread tc([&] {
    ComputeGate::Hold c = gate.Enter();
    log.Add("c");
  });
  std::this_thread::sleep_for(milliseconds(20));
  // c is not started: only b waits for a turn, and a yield runs b alone.
  EXPECT_EQ(gate.started(), 2);
  EXPECT_EQ(gate.waiting_turns(), 1);
  EXPECT_TRUE(a.Yield());
  tb.join();
  // b finished, so c started and now waits for a's next yield or release.
  ASSERT_TRUE(WaitFor([&] { return gate.waiting_turns() == 1; }));
  log.Add("a");
  EXPECT_TRUE(a.Yield());
  tc.join();
  EXPECT_EQ(log.events(), (std::vector<std::string>{"b", "a", "c"}));
}

TEST(ComputeGate, RaisingTheBoundLetsWaitersStart) {
  ComputeGate gate(/*max_started=*/1);
  ComputeGate::Hold a = gate.Enter();
  std::thread tb([&] { ComputeGate::Hold b = gate.Enter(); });
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(gate.started(), 1);
  gate.set_max_started(0);
  ASSERT_TRUE(WaitFor([&] { return gate.started() == 2; }));
  EXPECT_TRUE(a.Yield());
  tb.join();
}

// Spend() before each piece: a budget of 10 with pieces of 4 yields before the 3rd, 5th, ...
// piece (after 8 units), and only when somebody waits. waited_ms is the time the yields waited
// for the others' turns.
TEST(TurnBudget, YieldsWhenTheNextPieceWouldPassTheBudget) {
  ComputeGate gate;
  ComputeGate::Hold h = gate.Enter();
  TurnBudget alone(&h, 10);
  for (int i = 0; i < 6; ++i) alone.Spend(4);
  EXPECT_EQ(alone.yields(), 0);  // nobody waited
  EXPECT_EQ(alone.waited_ms(), 0.0);

  constexpr int kTurnMs = 20;  // each other caller's turn
  std::atomic<int> others_ran{0};
  std::vector<std::thread> threads;
  TurnBudget shared(&h, 10);
  std::vector<int> yields_after;
  for (int piece = 0; piece < 6; ++piece) {
    threads.emplace_back([&] {
      ComputeGate::Hold o = gate.Enter();
      std::this_thread::sleep_for(milliseconds(kTurnMs));
      ++others_ran;
    });
    ASSERT_TRUE(WaitFor([&] { return gate.waiting_turns() == 1; }));
    shared.Spend(4);
    yields_after.push_back(shared.yields());
    // A waiter that was not yielded to is still waiting: let it through before the next piece.
    if (gate.waiting_turns() == 1) h.Yield();
    threads.back().join();
  }
  // Pieces 0, 1 fit (0+4, 4+4 <= 10); piece 2 (8+4 > 10) yields first; then 4, 4 again.
  EXPECT_EQ(yields_after, (std::vector<int>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(others_ran.load(), 6);
  // Two yields, each through one other caller's whole turn.
  EXPECT_GE(shared.waited_ms(), 2.0 * kTurnMs);
}

TEST(TurnBudget, APieceLargerThanTheBudgetRunsWholeInItsOwnTurn) {
  ComputeGate gate;
  ComputeGate::Hold h = gate.Enter();
  TurnBudget budget(&h, 5);
  std::thread t([&] { ComputeGate::Hold o = gate.Enter(); });
  ASSERT_TRUE(WaitFor([&] { return gate.waiting_turns() == 1; }));
  budget.Spend(50);  // the first piece of a turn never yields
  EXPECT_EQ(budget.yields(), 0);
  budget.Spend(50);  // the next one does
  EXPECT_EQ(budget.yields(), 1);
  t.join();
}

TEST(TurnBudget, ZeroBudgetNeverYields) {
  ComputeGate gate;
  ComputeGate::Hold h = gate.Enter();
  TurnBudget budget(&h, 0);
  std::thread t([&] { ComputeGate::Hold o = gate.Enter(); });
  ASSERT_TRUE(WaitFor([&] { return gate.waiting_turns() == 1; }));
  for (int i = 0; i < 100; ++i) budget.Spend(1000);
  EXPECT_EQ(budget.yields(), 0);
  EXPECT_EQ(gate.waiting_turns(), 1);
  h.Yield();
  t.join();
}

}  // namespace
}  // namespace hap
