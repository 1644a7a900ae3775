// Client-side load balancing over the replicas of a peer service. Each address (from a
// comma-separated flag) gets its own channel whose gRPC load-balancing policy is round_robin,
// so a DNS name that resolves to several pods (a headless Service) spreads calls over all of
// them; across addresses, Pick() takes the replica with the fewest calls in flight from this
// process (ties go round-robin), so a slow or busy replica gets fewer new requests.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace hap::svc {

// "a:1,b:2" → {"a:1", "b:2"}; InvalidArgument (naming `flag`) for an empty list or entry.
absl::StatusOr<std::vector<std::string>> SplitAddresses(const std::string& list,
                                                        const std::string& flag);

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
      r->stub = Service::NewStub(channel(a));
      replicas_.push_back(std::move(r));
    }
  }

  Lease Pick() {
    const int n = static_cast<int>(replicas_.size());
    const int start = static_cast<int>(next_.fetch_add(1) % static_cast<uint64_t>(n));
    int best = start;
    for (int k = 1; k < n; ++k) {
      const int i = (start + k) % n;
      if (replicas_[i]->in_flight.load() < replicas_[best]->in_flight.load()) best = i;
    }
    replicas_[best]->in_flight.fetch_add(1);
    return Lease(this, best);
  }

 private:
  struct Replica {
    std::string address;
    std::unique_ptr<Stub> stub;
    std::atomic<int> in_flight{0};
  };
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace hap::svc
