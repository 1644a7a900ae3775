#include "base/compute_gate.h"

#include "base/timer.h"

namespace hap {

ComputeGate::Hold ComputeGate::Enter() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t entry = next_entry_++;
  cv_.wait(lock, [&] {
    return admitted_ == entry && (max_started_ <= 0 || started_ < max_started_);
  });
  ++admitted_;
  ++started_;
  const uint64_t turn = next_turn_++;
  // The next arrival may now start too (when the bound allows).
  cv_.notify_all();
  cv_.wait(lock, [&] { return serving_ == turn; });
  return Hold(this);
}

bool ComputeGate::Hold::Yield() {
  if (gate_ == nullptr) return false;  // a moved-from hold holds no turn
  std::unique_lock<std::mutex> lock(gate_->mu_);
  if (gate_->next_turn_ == gate_->serving_ + 1) return false;  // nobody waits for a turn
  const uint64_t turn = gate_->next_turn_++;
  ++gate_->serving_;
  gate_->cv_.notify_all();
  gate_->cv_.wait(lock, [&] { return gate_->serving_ == turn; });
  return true;
}

ComputeGate::Hold::~Hold() {
  if (gate_ == nullptr) return;
  // Notified under the lock: a waiter woken by this may be the gate's last user and destroy it.
  std::lock_guard<std::mutex> lock(gate_->mu_);
  ++gate_->serving_;
  --gate_->started_;
  gate_->cv_.notify_all();
}

void ComputeGate::set_max_started(int max_started) {
  std::lock_guard<std::mutex> lock(mu_);
  max_started_ = max_started;
  cv_.notify_all();
}

int ComputeGate::waiting_turns() const {
  std::lock_guard<std::mutex> lock(mu_);
  // Every started caller holds one turn ticket; the one being served is not waiting.
  return static_cast<int>(next_turn_ - serving_) - (started_ > 0 ? 1 : 0);
}

int ComputeGate::started() const {
  std::lock_guard<std::mutex> lock(mu_);
  return started_;
}

void TurnBudget::Spend(int64_t units) {
  if (budget_ > 0 && spent_ > 0 && spent_ + units > budget_) {
    const Clock::time_point t0 = Clock::now();
    if (hold_->Yield()) {
      ++yields_;
      waited_ms_ += MsSince(t0);
    }
    spent_ = 0;
  }
  spent_ += units;
}

ComputeGate& ProcessComputeGate() {
  static ComputeGate* gate = new ComputeGate();
  return *gate;
}

}  // namespace hap
