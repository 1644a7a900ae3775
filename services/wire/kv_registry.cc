#include "services/wire/kv_registry.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace hap::svc {

KvRegistry::KvRegistry(int64_t max_bytes) : max_bytes_(max_bytes) {
  reaper_ = std::thread([this] { ReaperLoop(); });
}

KvRegistry::~KvRegistry() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  reaper_.join();
}

absl::StatusOr<KvRegistry::Handle> KvRegistry::Acquire(const std::string& id, int64_t bytes,
                                                       int64_t lease_ms,
                                                       std::function<void()> on_expire) {
  auto entry = std::make_shared<Entry>();
  entry->id = id;
  entry->bytes = bytes;
  entry->on_expire = std::move(on_expire);
  std::lock_guard<std::mutex> lock(mu_);
  if (max_bytes_ > 0 && bytes_ + bytes > max_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache of ", bytes, " bytes does not fit: ", bytes_, " of ", max_bytes_,
                     " bytes are held (limit --max-kv-bytes)"));
  }
  bytes_ += bytes;
  if (lease_ms > 0) {
    entry->lease_active = true;
    entry->deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(lease_ms);
  }
  live_[entry.get()] = entry;
  cv_.notify_all();
  return entry;
}

bool KvRegistry::EndLease(const Handle& handle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!handle->lease_active) return false;
    handle->lease_active = false;
  }
  std::lock_guard<std::mutex> lock(handle->callback_mu);
  handle->on_expire = nullptr;
  return true;
}

void KvRegistry::Release(const Handle& handle) {
  if (!handle) return;
  {
    std::lock_guard<std::mutex> lock(handle->callback_mu);
    handle->released = true;
    handle->on_expire = nullptr;
  }
  std::lock_guard<std::mutex> lock(mu_);
  handle->lease_active = false;
  if (live_.erase(handle.get()) > 0) bytes_ -= handle->bytes;
}

KvRegistry::Snapshot KvRegistry::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot s;
  s.caches = static_cast<int>(live_.size());
  s.bytes = bytes_;
  for (const auto& [ptr, h] : live_) s.leases += h->lease_active ? 1 : 0;
  s.leases_expired = expired_;
  return s;
}

void KvRegistry::ReaperLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    const auto now = std::chrono::steady_clock::now();
    std::vector<Handle> expired;
    auto next = now + std::chrono::seconds(1);
    for (const auto& [ptr, h] : live_) {
      if (!h->lease_active) continue;
      if (h->deadline <= now) {
        h->lease_active = false;
        ++expired_;
        expired.push_back(h);
      } else if (h->deadline < next) {
        next = h->deadline;
      }
    }
    if (!expired.empty()) {
      lock.unlock();
      for (const Handle& h : expired) {
        std::lock_guard<std::mutex> cb_lock(h->callback_mu);
        if (!h->released && h->on_expire) {
          auto fn = std::move(h->on_expire);
          h->on_expire = nullptr;
          fn();
        }
      }
      lock.lock();
      continue;
    }
    cv_.wait_until(lock, next);
  }
}

}  // namespace hap::svc
