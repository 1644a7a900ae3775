// The decode replicas' free KV-cache memory, as hap-prefill learns it: a thread asks every
// replica for Debug.GetState each poll interval and hands (blocks total − blocks in use) × block
// bytes to the replica set's KvReports, which Pick then chooses by (see KvReports for the rule).
// A replica that does not answer within the deadline, or has no KV pool, is reported unknown.
// A round asks every replica at once, so one that accepts connections and never answers costs the
// round one deadline, not one per replica behind it.
// Each round polls the members the set has then (they change when a refresh resolves the
// configured names to other pods).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "hap/v1/debug.grpc.pb.h"
#include "hap/v1/decode.grpc.pb.h"
#include "services/routing/replica_set.h"
#include "services/server/periodic_task.h"

namespace hap::svc {

class DecodeLoadPoller {
 public:
  // Enables KV reports on `decoders` (stale after 4 intervals) and starts polling at once.
  // `decoders` must outlive the poller.
  DecodeLoadPoller(ReplicaSet<hap::v1::Decode>* decoders, std::chrono::milliseconds interval);
  ~DecodeLoadPoller();  // Stop()

  // Cancels the calls in progress and joins the thread; idempotent.
  void Stop();

  // One round over every replica (what the thread does each interval).
  void PollOnce();

 private:
  ReplicaSet<hap::v1::Decode>* decoders_;
  const std::chrono::milliseconds deadline_;
  std::mutex mu_;
  bool stop_ = false;
  std::vector<grpc::ClientContext*> calls_;  // the round's GetState calls, for Stop to cancel
  std::unique_ptr<PeriodicTask> thread_;  // last: stops first
};

}  // namespace hap::svc
