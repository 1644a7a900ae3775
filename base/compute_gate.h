// One compute-heavy stage at a time per process, in turns. The services run each request on its
// own thread; a prefill or an image encode already uses every core (the compute pool, sized by
// --threads), so two at once would only oversubscribe the cores and finish both later. Requests
// wait here, in arrival order, without spinning.
//
// A holder may hand its turn on between pieces of its work (Hold::Yield): the callers waiting at
// that moment each get a turn first, and the holder continues after them. That is how a long
// prefill is sliced so that short ones arriving behind it do not wait for all of it
// (TurnBudget, docs/design.md §6 "Prefill in slices"). Since a yielded holder keeps what its work
// holds (activations, a KV cache) while it waits, the gate can bound how many callers are
// started at once: past `max_started`, newcomers wait before taking a turn at all.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace hap {

class ComputeGate {
 public:
  // Held from Enter() until destroyed (move-only).
  class Hold {
   public:
    Hold(Hold&& o) noexcept : gate_(o.gate_) { o.gate_ = nullptr; }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold();

    // Hands the turn to the callers waiting for one now, if any, and returns once each of them
    // has had a turn (they may yield too; the order stays first come, first served). False,
    // at once, when nobody waits.
    bool Yield();

   private:
    friend class ComputeGate;
    explicit Hold(ComputeGate* gate) : gate_(gate) {}
    ComputeGate* gate_;
  };

  // max_started: how many callers may be between Enter() and the end of their Hold at once
  // (holding the turn or waiting after a yield); 0 = no bound.
  explicit ComputeGate(int max_started = 0) : max_started_(max_started) {}

  // Waits, in arrival order, for a place among the started callers and then for the turn.
  Hold Enter();

  // Changes the bound for callers that have not started yet (a process sets its gate up once).
  void set_max_started(int max_started);

  // Started callers waiting for a turn (yielded ones and those that just started).
  int waiting_turns() const;
  // Callers between Enter() and the end of their Hold.
  int started() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int max_started_;
  int started_ = 0;
  uint64_t next_entry_ = 0;  // arrival order, for a place among the started callers
  uint64_t admitted_ = 0;    // the entry allowed to start next
  uint64_t next_turn_ = 0;   // handed to the next caller that starts or yields
  uint64_t serving_ = 0;     // the turn being served
};

// Shares a held gate by the work done. Spend(units) comes before each piece of work (a prefill:
// the rows of the next decoder layer); once this turn has spent something and the next piece
// would take it past `budget`, the hold yields first. budget <= 0: never yields.
class TurnBudget {
 public:
  TurnBudget(ComputeGate::Hold* hold, int64_t budget) : hold_(hold), budget_(budget) {}

  void Spend(int64_t units);

  int yields() const { return yields_; }         // turns handed to others
  double waited_ms() const { return waited_ms_; }  // time spent waiting for them

 private:
  ComputeGate::Hold* hold_;
  const int64_t budget_;
  int64_t spent_ = 0;  // in this turn
  int yields_ = 0;
  double waited_ms_ = 0;
};

// The process's gate (no bound on started callers until set_max_started).
ComputeGate& ProcessComputeGate();

}  // namespace hap
