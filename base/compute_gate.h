// One compute-heavy stage at a time per process, first come first served. The services run
// each request on its own thread; a prefill or an image encode already uses every core (the
// compute pool and OpenBLAS, both sized by --threads), so two at once would only oversubscribe
// the cores and finish both later. Requests wait here, in arrival order, without spinning.
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

   private:
    friend class ComputeGate;
    explicit Hold(ComputeGate* gate) : gate_(gate) {}
    ComputeGate* gate_;
  };

  // Waits for every earlier Enter() to be released.
  Hold Enter();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ticket_ = 0;  // handed to the next caller
  uint64_t serving_ = 0;      // the ticket allowed in
};

// The process's gate.
ComputeGate& ProcessComputeGate();

}  // namespace hap
