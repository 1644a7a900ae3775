// One Generate call on the front door. Checked on receipt (gRPC thread: the bearer token when
// authentication is on, the request, the client's and the server's limits); then a worker runs
// encode → prefill → KV transfer → relay of decode's tokens. Cancelling the call (or its
// deadline) cancels the peer calls, which stops decode and frees the KV caches.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "hap/v1/generate.grpc.pb.h"
#include "runtime/model/pipeline.h"
#include "services/prefill/prefill_service.h"
#include "services/wire/outbox_reactor.h"

namespace hap::svc {

// The client calls a request has open to peers, so a cancel reaches all of them.
class ChildCalls {
 public:
  void Add(grpc::ClientContext* ctx);
  void Remove(grpc::ClientContext* ctx);
  void CancelAll();

 private:
  std::mutex mu_;
  std::set<grpc::ClientContext*> calls_;
  bool cancelled_ = false;
};

class GenerateReactor final
    : public OutboxReactor<grpc::ServerWriteReactor<hap::v1::GenerateResponse>,
                           hap::v1::GenerateResponse> {
 public:
  GenerateReactor(PrefillService* service, grpc::CallbackServerContext* ctx,
                  const hap::v1::GenerateRequest* request);

 private:
  using Clock = std::chrono::steady_clock;

  void OnCancelled() override { children_.CancelAll(); }
  // Every way the call ends: the client's slot is given back before the status can reach the
  // client, so its next call is not refused for a request already answered.
  void End(const absl::Status& status);

  absl::Status Execute();
  // The image's embeddings from an encoder replica; one that is unavailable before it sends
  // anything is replaced by another, up to three attempts in all.
  absl::StatusOr<EncodeResult> CallEncoder();
  // One encoder call, to a replica other than `avoid` where there is one; *address is the
  // replica's, *retryable true when it failed UNAVAILABLE before sending anything.
  absl::StatusOr<EncodeResult> CallEncoderOnce(const std::string& avoid, std::string* address,
                                               bool* retryable);
  // The decode call in progress, for the KV lease's expiry to cancel (a retry replaces it).
  struct DecodeCall {
    std::mutex mu;
    grpc::ClientContext* ctx = nullptr;
    std::atomic<bool> lease_expired{false};
    void Expire();
    void Set(grpc::ClientContext* c);
  };
  // Streams the cache to decode, relays the tokens and sends the stats. A decode replica that is
  // unavailable before it took the cache (down, draining, gone since the last refresh) is
  // replaced by another, up to three attempts in all.
  absl::Status TransferAndRelay(PrefillResult prefill);
  // One decode call, to a replica other than `avoid` where there is one: the cache out (handed
  // over on the device where `handover` and the replica has not refused one, else its rows),
  // the tokens relayed, the stats sent. *address is the replica's, *retryable true when it failed
  // UNAVAILABLE before decode took the cache and before any token; a refused handover returns
  // its FAILED_PRECONDITION (IsKvHandoverRefusal) with nothing sent to the client.
  absl::Status DecodeOnce(PrefillResult& prefill, const KvRegistry::Handle& lease,
                          DecodeCall& call_slot, const std::string& avoid, std::string* address,
                          bool* retryable, bool handover);
  absl::Status CheckCancelled(const char* stage) const;

  PrefillService* service_;
  grpc::CallbackServerContext* ctx_;
  const hap::v1::GenerateRequest* request_;
  GenerateJob job_;
  ServerState::RequestGuard guard_;
  ClientSlot client_slot_;  // with authentication: this request counted for its client
  ChildCalls children_;
  Clock::time_point received_;
  hap::v1::StageTimings timings_;
};

}  // namespace hap::svc
