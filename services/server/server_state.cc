#include "services/server/server_state.h"

#include "absl/strings/str_cat.h"

namespace hap::svc {

ServerState::RequestGuard& ServerState::RequestGuard::operator=(RequestGuard&& o) noexcept {
  if (this != &o) {
    Reset();
    state_ = o.state_;
    key_ = o.key_;
    o.state_ = nullptr;
  }
  return *this;
}

void ServerState::RequestGuard::Reset() {
  if (state_ == nullptr) return;
  {
    // Notified under the lock: once WaitIdle sees no request in flight, the state may be
    // destroyed (the process shuts down), so idle_cv_ must not be touched after the unlock.
    std::lock_guard<std::mutex> lock(state_->mu_);
    state_->in_flight_.erase(key_);
    state_->idle_cv_.notify_all();
  }
  state_ = nullptr;
}

void ServerState::RequestGuard::Rename(const std::string& request_id) {
  if (state_ == nullptr) return;
  std::lock_guard<std::mutex> lock(state_->mu_);
  state_->in_flight_[key_] = request_id;
}

ServerState::RequestGuard ServerState::Begin(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t key = next_key_++;
  in_flight_[key] = request_id;
  ++total_;
  return RequestGuard(this, key);
}

std::string ServerState::NewRequestId(const std::string& prefix) {
  return absl::StrCat(prefix, "-", next_id_++);
}

absl::Status ServerState::CheckAccepting() const {
  if (draining_) {
    return absl::UnavailableError(absl::StrCat(service_, " is draining (shutting down)"));
  }
  if (!ready_) return absl::UnavailableError(absl::StrCat(service_, " is still loading its model"));
  return absl::OkStatus();
}

bool ServerState::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_until(lock, deadline, [&] { return in_flight_.empty(); });
}

int ServerState::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(in_flight_.size());
}

hap::v1::ServerState ServerState::Snapshot() const {
  hap::v1::ServerState s;
  s.set_service(service_);
  s.set_serving(serving());
  s.set_draining(draining_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.set_in_flight_requests(static_cast<int>(in_flight_.size()));
    s.set_requests_total(total_);
    for (const auto& [key, id] : in_flight_) s.add_in_flight_ids(id);
  }
  if (pool_ != nullptr) {
    s.set_queued_requests(pool_->queued());
    s.set_requests_rejected(pool_->rejected());
  }
  if (kv_ != nullptr) {
    const KvRegistry::Snapshot kv = kv_->snapshot();
    s.set_kv_caches_held(kv.caches);
    s.set_kv_bytes_held(kv.bytes);
    s.set_kv_leases(kv.leases);
    s.set_leases_expired(kv.leases_expired);
  }
  if (const KvBlockPool* pool = kv_pool_.load(); pool != nullptr) {
    const KvPoolStats p = pool->stats();
    s.set_kv_pool_blocks_total(p.blocks_total);
    s.set_kv_pool_blocks_in_use(p.blocks_in_use);
    s.set_kv_pool_blocks_peak(p.blocks_peak);
    s.set_kv_pool_block_bytes(p.bytes_per_block);
  }
  return s;
}

}  // namespace hap::svc
