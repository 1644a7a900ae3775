#include "base/compute_gate.h"

namespace hap {

ComputeGate::Hold ComputeGate::Enter() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t ticket = next_ticket_++;
  cv_.wait(lock, [&] { return serving_ == ticket; });
  return Hold(this);
}

ComputeGate::Hold::~Hold() {
  if (gate_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(gate_->mu_);
    ++gate_->serving_;
  }
  gate_->cv_.notify_all();
}

ComputeGate& ProcessComputeGate() {
  static ComputeGate* gate = new ComputeGate();
  return *gate;
}

}  // namespace hap
