// Every KV cache alive in a service process, with the transfer lease on it: a cache that waits
// on a transfer (prefill sending it, decode receiving it) must see the transfer finish before
// its lease runs out, or the lease's expiry callback abandons the transfer and the cache is
// freed. The debug RPC reports what is held, so tests can prove nothing leaks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace hap::svc {

class KvRegistry {
 public:
  struct Entry;
  using Handle = std::shared_ptr<Entry>;

  struct Snapshot {
    int caches = 0;
    int64_t bytes = 0;
    int leases = 0;
    int64_t leases_expired = 0;
  };

  // max_bytes: the most K/V bytes held at once (0 = unlimited).
  explicit KvRegistry(int64_t max_bytes);
  ~KvRegistry();
  KvRegistry(const KvRegistry&) = delete;
  KvRegistry& operator=(const KvRegistry&) = delete;

  // Accounts `bytes` for request `id`. lease_ms > 0 starts a lease: unless EndLease() comes
  // first, `on_expire` runs once on the registry's thread after lease_ms. It must neither block
  // nor call back into the registry. ResourceExhausted when the bytes do not fit max_bytes.
  absl::StatusOr<Handle> Acquire(const std::string& id, int64_t bytes, int64_t lease_ms,
                                 std::function<void()> on_expire);
  // The transfer finished: stops the lease. False when it had already expired.
  bool EndLease(const Handle& handle);
  // The cache is gone: its bytes stop counting. Idempotent; null is fine. Waits for an expiry
  // callback that is running.
  void Release(const Handle& handle);

  Snapshot snapshot() const;

 private:
  void ReaperLoop();

  const int64_t max_bytes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<Entry*, Handle> live_;
  int64_t bytes_ = 0;
  int64_t expired_ = 0;
  bool stop_ = false;
  std::thread reaper_;
};

struct KvRegistry::Entry {
  std::string id;
  int64_t bytes = 0;
  std::chrono::steady_clock::time_point deadline;
  bool lease_active = false;  // guarded by the registry's mutex
  std::mutex callback_mu;     // held while on_expire runs
  bool released = false;      // guarded by callback_mu
  std::function<void()> on_expire;
};

}  // namespace hap::svc
