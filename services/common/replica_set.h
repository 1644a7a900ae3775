// Client-side load balancing over the replicas of a peer service. Each address (from a
// comma-separated flag) gets its own channel whose gRPC load-balancing policy is round_robin,
// so a DNS name that resolves to several pods (a headless Service) spreads calls over all of
// them; across addresses, Pick() takes the replica with the fewest calls in flight from this
// process (ties go round-robin), so a slow or busy replica gets fewer new requests.
//
// A set can also choose by the free KV-cache memory its replicas report (EnableKvReports; the
// decode replicas, polled by hap-prefill's DecodeLoadPoller): see KvReports for the rule.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace hap::svc {

// "a:1,b:2" → {"a:1", "b:2"}; InvalidArgument (naming `flag`) for an empty list or entry.
absl::StatusOr<std::vector<std::string>> SplitAddresses(const std::string& list,
                                                        const std::string& flag);

// The free KV-cache bytes each replica last reported, less what this process has sent it since,
// and the choice rule over them. Thread-safe.
//
// Rule (Choose): when every replica has a fresh report (younger than `stale_after`), the replica
// with the most estimated free bytes wins, where the estimate is the reported free bytes minus
// the bytes of the picks this process made of it since the report was asked for (each Choose
// with a byte count claims them; a newer report drops the claims made before it was asked for,
// taking those calls to be in it: reserved by then, or finished). Replicas tied at the most
// estimated bytes, and every replica when any report is missing, stale or without a pool, go by
// the fewest-in-flight rule (ties in turn from `start`).
class KvReports {
 public:
  using Clock = std::chrono::steady_clock;

  KvReports(int replicas, std::chrono::milliseconds stale_after);

  // Replica `i` reported `free_bytes` (blocks free × block bytes) in answer to a request sent at
  // `asked_at`.
  void Report(int i, int64_t free_bytes, Clock::time_point asked_at);
  // Replica `i` did not answer, or has no KV pool: unknown until its next report.
  void Unknown(int i);

  // The replica a call needing `bytes` of KV goes to, given each replica's calls in flight, and
  // the claim of `bytes` on it. `start` is where the in-turn tie-break begins.
  int Choose(const std::vector<int>& in_flight, int start, int64_t bytes,
             Clock::time_point now = Clock::now());

  // Replica `i`'s estimated free bytes at `now` into *free_bytes; false when unknown or stale.
  bool Estimate(int i, Clock::time_point now, int64_t* free_bytes) const;

 private:
  struct Entry {
    bool known = false;
    int64_t free_bytes = 0;
    Clock::time_point asked_at;
    std::deque<std::pair<Clock::time_point, int64_t>> claims;  // picks since asked_at
    int64_t claimed = 0;                                       // their sum
  };
  bool FreshLocked(const Entry& e, Clock::time_point now) const;

  const std::chrono::milliseconds stale_after_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
};

// The fewest-in-flight rule over `candidates` (indices into in_flight), ties in turn from
// `start` (the first candidate at or after it, cyclically, of the fewest wins).
int FewestInFlight(const std::vector<int>& in_flight, const std::vector<int>& candidates,
                   int start);

// Service is a generated gRPC service class (hap::v1::Decode, ...).
template <typename Service>
class ReplicaSet {
 public:
  using Stub = typename Service::Stub;

  // A replica chosen for one call; the call counts as in flight until the lease is destroyed.
  class Lease {
   public:
    Lease(Lease&& other) noexcept : set_(other.set_), index_(other.index_) { other.set_ = nullptr; }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() {
      if (set_ != nullptr) set_->replicas_[index_]->in_flight.fetch_sub(1);
    }
    Stub* stub() const { return set_->replicas_[index_]->stub.get(); }
    const std::string& address() const { return set_->replicas_[index_]->address; }
    int index() const { return index_; }

   private:
    friend class ReplicaSet;
    Lease(ReplicaSet* set, int index) : set_(set), index_(index) {}
    ReplicaSet* set_;
    int index_;
  };

  ReplicaSet(const std::vector<std::string>& addresses,
             const std::function<std::shared_ptr<grpc::Channel>(const std::string&)>& channel) {
    for (const std::string& a : addresses) {
      auto r = std::make_unique<Replica>();
      r->address = a;
      r->channel = channel(a);
      r->stub = Service::NewStub(r->channel);
      replicas_.push_back(std::move(r));
    }
  }

  // Choose by reported free KV from now on (see KvReports); reports older than `stale_after`
  // do not count. Call before the first Pick.
  void EnableKvReports(std::chrono::milliseconds stale_after) {
    kv_reports_ = std::make_unique<KvReports>(size(), stale_after);
  }
  KvReports* kv_reports() { return kv_reports_.get(); }  // null unless enabled

  int size() const { return static_cast<int>(replicas_.size()); }
  const std::string& address(int i) const { return replicas_[i]->address; }
  const std::shared_ptr<grpc::Channel>& channel(int i) const { return replicas_[i]->channel; }

  // `kv_bytes`: the KV memory the call will need on the replica (0 = unknown or none); it only
  // matters with KV reports enabled.
  Lease Pick(int64_t kv_bytes = 0) {
    const int n = size();
    const int start = static_cast<int>(next_.fetch_add(1) % static_cast<uint64_t>(n));
    std::vector<int> in_flight(n), all(n);
    for (int i = 0; i < n; ++i) {
      in_flight[i] = replicas_[i]->in_flight.load();
      all[i] = i;
    }
    const int best = kv_reports_ != nullptr ? kv_reports_->Choose(in_flight, start, kv_bytes)
                                            : FewestInFlight(in_flight, all, start);
    replicas_[best]->in_flight.fetch_add(1);
    return Lease(this, best);
  }

 private:
  struct Replica {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<Stub> stub;
    std::atomic<int> in_flight{0};
  };
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::atomic<uint64_t> next_{0};
  std::unique_ptr<KvReports> kv_reports_;
};

}  // namespace hap::svc
