// Client-side load balancing over the replicas of a peer service. Each address (from a
// comma-separated flag) gets its own channel whose gRPC load-balancing policy is round_robin,
// so a DNS name that resolves to several pods (a headless Service) spreads calls over all of
// them; across addresses, Pick() takes the replica with the fewest calls in flight from this
// process (ties go round-robin), so a slow or busy replica gets fewer new requests. Replicas
// whose channel is connected are chosen first, and one failing to connect (TRANSIENT_FAILURE)
// only when every one is.
//
// Refresh() resolves each configured name and makes every address it resolves to (each pod
// behind a headless Service) a replica of its own, so the choice sees the pods one by one; the
// front door calls it periodically (--peer-refresh-ms).
//
// A set can also choose by the free KV-cache memory its replicas report (EnableKvReports; the
// decode replicas, polled by hap-prefill's DecodeLoadPoller): see KvReports for the rule.
#pragma once

#include <algorithm>
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

// The addresses a configured peer address stands for: "name:port" → every address the name
// resolves to, as "a.b.c.d:port" or "[v6]:port", sorted and without repeats. Anything else (an
// IP literal, a gRPC target with a scheme such as "dns:///name:port" or "unix:path") stands for
// itself. NotFound / Unavailable when the name does not resolve.
using AddressResolver =
    std::function<absl::StatusOr<std::vector<std::string>>(const std::string& address)>;
absl::StatusOr<std::vector<std::string>> ResolvePeerAddress(const std::string& address);

// What the set dials for each configured address, given the resolver and what it dialled before
// (`previous`: configured address → its addresses last time). A name that fails to resolve keeps
// its previous addresses, or stands for itself when it has none (gRPC then resolves it).
std::vector<std::pair<std::string, std::string>> ExpandAddresses(
    const std::vector<std::string>& configured, const AddressResolver& resolve,
    const std::vector<std::pair<std::string, std::string>>& previous);

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
  // The same rule over the replicas in `eligible` (indices, not empty) only.
  int Choose(const std::vector<int>& in_flight, const std::vector<int>& eligible, int start,
             int64_t bytes, Clock::time_point now = Clock::now());

  // Replica `i` takes over what `from` knew of its replica `j` (the same address in a set whose
  // members changed).
  void Adopt(int i, const KvReports& from, int j);

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
  // A channel to `address`; `authority` is the configured address it came from (the name for
  // TLS and the :authority header when `address` is one of the name's resolved addresses).
  using ChannelFactory = std::function<std::shared_ptr<grpc::Channel>(
      const std::string& address, const std::string& authority)>;

  struct Replica {
    std::string address;     // what the channel dials
    std::string configured;  // the configured address it stands for (== address unless resolved)
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<Stub> stub;
    std::atomic<int> in_flight{0};
  };
  // The replicas at one moment, and their KV reports (null unless enabled). Refresh replaces
  // the whole; a Lease or a caller holding the old one keeps it alive.
  struct Members {
    std::vector<std::shared_ptr<Replica>> replicas;
    std::shared_ptr<KvReports> kv_reports;
  };

  // A replica chosen for one call; the call counts as in flight until the lease is destroyed.
  class Lease {
   public:
    Lease(Lease&& other) noexcept = default;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() {
      if (replica_ != nullptr) replica_->in_flight.fetch_sub(1);
    }
    Stub* stub() const { return replica_->stub.get(); }
    const std::string& address() const { return replica_->address; }
    int index() const { return index_; }  // in the members the pick was made from

   private:
    friend class ReplicaSet;
    Lease(std::shared_ptr<Replica> replica, int index)
        : replica_(std::move(replica)), index_(index) {}
    std::shared_ptr<Replica> replica_;
    int index_;
  };

  ReplicaSet(const std::vector<std::string>& addresses, ChannelFactory channel)
      : configured_(addresses), channel_(std::move(channel)) {
    std::vector<std::pair<std::string, std::string>> targets;
    for (const std::string& a : addresses) targets.emplace_back(a, a);
    members_ = Build(targets, nullptr);
  }

  // Choose by reported free KV from now on (see KvReports); reports older than `stale_after`
  // do not count. Call before the first Pick.
  void EnableKvReports(std::chrono::milliseconds stale_after) {
    std::lock_guard<std::mutex> lock(mu_);
    stale_after_ = stale_after;
    auto next = std::make_shared<Members>(*members_);
    next->kv_reports =
        std::make_shared<KvReports>(static_cast<int>(next->replicas.size()), stale_after);
    members_ = std::move(next);
  }

  std::shared_ptr<const Members> members() const {
    std::lock_guard<std::mutex> lock(mu_);
    return members_;
  }
  // The current members' reports (null unless enabled); a refresh gives the next members their own.
  std::shared_ptr<KvReports> kv_reports() const { return members()->kv_reports; }
  int size() const { return static_cast<int>(members()->replicas.size()); }
  std::string address(int i) const { return members()->replicas[i]->address; }

  // Resolves the configured addresses again (ExpandAddresses) and, when what they stand for
  // changed, replaces the members: replicas that stay keep their channel, calls in flight and KV
  // report; new ones start unknown. True when the members changed.
  bool Refresh(const AddressResolver& resolve) {
    const std::shared_ptr<const Members> before = members();
    // Resolved without the lock (DNS may take a while); picks go on meanwhile.
    const std::vector<std::pair<std::string, std::string>> targets =
        ExpandAddresses(configured_, resolve, Targets(*before));
    std::lock_guard<std::mutex> lock(mu_);
    if (Targets(*members_) == targets) return false;
    members_ = Build(targets, members_.get());
    return true;
  }

  // `kv_bytes`: the KV memory the call will need on the replica (0 = unknown or none); it only
  // matters with KV reports enabled. `avoid`: a replica address passed over while there is
  // another (the one a failed attempt of the same request went to).
  Lease Pick(int64_t kv_bytes = 0, const std::string& avoid = "") {
    const std::shared_ptr<const Members> m = members();
    const int n = static_cast<int>(m->replicas.size());
    const int start = static_cast<int>(next_.fetch_add(1) % static_cast<uint64_t>(n));
    const bool avoiding =
        !avoid.empty() && std::any_of(m->replicas.begin(), m->replicas.end(),
                                      [&](const auto& r) { return r->address != avoid; });
    // Connected replicas first; else those not failing to connect; else all (the call then
    // reports the failure). Asking for the state also starts connecting an idle channel, so a
    // replica that joined or went idle is connected by the next picks.
    std::vector<int> in_flight(n), ready, usable, all;
    for (int i = 0; i < n; ++i) {
      in_flight[i] = m->replicas[i]->in_flight.load();
      if (avoiding && m->replicas[i]->address == avoid) continue;
      const grpc_connectivity_state state =
          m->replicas[i]->channel->GetState(/*try_to_connect=*/true);
      if (state == GRPC_CHANNEL_READY) ready.push_back(i);
      if (state != GRPC_CHANNEL_TRANSIENT_FAILURE && state != GRPC_CHANNEL_SHUTDOWN) {
        usable.push_back(i);
      }
      all.push_back(i);
    }
    const std::vector<int>& eligible = !ready.empty() ? ready : !usable.empty() ? usable : all;
    const int best = m->kv_reports != nullptr
                         ? m->kv_reports->Choose(in_flight, eligible, start, kv_bytes)
                         : FewestInFlight(in_flight, eligible, start);
    m->replicas[best]->in_flight.fetch_add(1);
    return Lease(m->replicas[best], best);
  }

 private:
  // The (configured, address) pair of each of `m`'s replicas.
  static std::vector<std::pair<std::string, std::string>> Targets(const Members& m) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& r : m.replicas) out.emplace_back(r->configured, r->address);
    return out;
  }

  // Members for `targets` ((configured, address) pairs), reusing the replicas and KV reports of
  // `old` where the address is the same. Under mu_ (or in the constructor).
  std::shared_ptr<const Members> Build(
      const std::vector<std::pair<std::string, std::string>>& targets, const Members* old) {
    auto m = std::make_shared<Members>();
    std::vector<int> old_index;
    for (const auto& [configured, address] : targets) {
      int found = -1;
      for (size_t j = 0; old != nullptr && j < old->replicas.size(); ++j) {
        if (old->replicas[j]->address == address && old->replicas[j]->configured == configured) {
          found = static_cast<int>(j);
        }
      }
      old_index.push_back(found);
      if (found >= 0) {
        m->replicas.push_back(old->replicas[found]);
        continue;
      }
      auto r = std::make_shared<Replica>();
      r->address = address;
      r->configured = configured;
      r->channel = channel_(address, configured);
      r->stub = Service::NewStub(r->channel);
      m->replicas.push_back(std::move(r));
    }
    if (old != nullptr && old->kv_reports != nullptr) {
      m->kv_reports = std::make_shared<KvReports>(static_cast<int>(targets.size()), stale_after_);
      for (size_t i = 0; i < targets.size(); ++i) {
        if (old_index[i] < 0) continue;
        m->kv_reports->Adopt(static_cast<int>(i), *old->kv_reports, old_index[i]);
      }
    }
    return m;
  }

  const std::vector<std::string> configured_;
  const ChannelFactory channel_;
  mutable std::mutex mu_;
  std::shared_ptr<const Members> members_;
  std::chrono::milliseconds stale_after_{0};
  std::atomic<uint64_t> next_{0};
};

}  // namespace hap::svc
