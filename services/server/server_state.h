// What a service process is doing right now: loading/serving/draining, the requests in flight,
// its worker pool and KV caches. The debug RPC and the drain on SIGTERM read it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "hap/v1/debug.pb.h"
#include "runtime/engine/kv_block_pool.h"
#include "services/server/worker_pool.h"
#include "services/wire/kv_registry.h"

namespace hap::svc {

class ServerState {
 public:
  explicit ServerState(std::string service) : service_(std::move(service)) {}

  // Marks a request in flight until the guard is destroyed (move-only).
  class RequestGuard {
   public:
    RequestGuard() = default;
    RequestGuard(RequestGuard&& o) noexcept : state_(o.state_), key_(o.key_) { o.state_ = nullptr; }
    RequestGuard& operator=(RequestGuard&& o) noexcept;
    RequestGuard(const RequestGuard&) = delete;
    RequestGuard& operator=(const RequestGuard&) = delete;
    ~RequestGuard() { Reset(); }
    void Reset();
    // The request's id became known (decode learns it from the KV header): the same request,
    // counted once in requests_total.
    void Rename(const std::string& request_id);

   private:
    friend class ServerState;
    RequestGuard(ServerState* state, uint64_t key) : state_(state), key_(key) {}
    ServerState* state_ = nullptr;
    uint64_t key_ = 0;
  };
  RequestGuard Begin(const std::string& request_id);

  // "<prefix>-<n>" for requests that came without an id.
  std::string NewRequestId(const std::string& prefix);

  // OK while serving; Unavailable while the model loads or the server drains.
  absl::Status CheckAccepting() const;
  void SetReady() { ready_ = true; }
  void SetDraining() { draining_ = true; }
  bool serving() const { return ready_ && !draining_; }
  bool draining() const { return draining_; }

  void Attach(WorkerPool* pool, KvRegistry* kv) {
    pool_ = pool;
    kv_ = kv;
  }
  // hap-decode's KV block pool, reported by Snapshot().
  void AttachKvPool(const KvBlockPool* kv_pool) { kv_pool_ = kv_pool; }

  // Waits until no request is in flight; false if `deadline` came first.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);
  int in_flight() const;

  hap::v1::ServerState Snapshot() const;

 private:
  const std::string service_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{1};
  WorkerPool* pool_ = nullptr;
  KvRegistry* kv_ = nullptr;
  std::atomic<const KvBlockPool*> kv_pool_{nullptr};

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::map<uint64_t, std::string> in_flight_;
  uint64_t next_key_ = 1;
  int64_t total_ = 0;
};

}  // namespace hap::svc
