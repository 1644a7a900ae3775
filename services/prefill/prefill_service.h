// hap.v1.Generation, the front door: checks a request, has the encoder turn the image into
// embeddings, runs the pruned prefill here, streams the compacted KV cache and the first token to
// the decode service and relays decode's tokens to the client, ending with the stats.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "hap/v1/decode.grpc.pb.h"
#include "hap/v1/encoder.grpc.pb.h"
#include "hap/v1/generate.grpc.pb.h"
#include "runtime/model/generate.h"
#include "runtime/model/sampler.h"
#include "runtime/model/vision_language_model.h"
#include "runtime/prune/factory.h"
#include "services/auth/token_auth.h"
#include "services/prefill/decode_load.h"
#include "services/prefill/prefill_batcher.h"
#include "services/routing/replica_set.h"
#include "services/server/periodic_task.h"
#include "services/server/server_state.h"
#include "services/server/service_metrics.h"
#include "services/server/worker_pool.h"
#include "services/wire/kv_registry.h"

namespace hap::svc {

struct PrefillConfig {
  // One or more replicas each (the flags take comma-separated lists); see ReplicaSet.
  std::vector<std::string> encoder_addresses;
  std::vector<std::string> decode_addresses;
  int max_message_bytes = 4 << 20;
  int64_t max_image_bytes = 16 << 20;
  hap::v1::Pruning default_pruning;  // method + budget for requests that leave them out
  int64_t lease_ms = 30000;          // the KV transfer to decode must finish within this
  // Generate messages waiting for a client that stopped reading, at most; beyond it the call is
  // cut off with RESOURCE_EXHAUSTED (OutboxReactor).
  size_t max_stream_queue = 4096;
  // A prefill hands the compute to prefills waiting behind it after each slice of decoder layers
  // worth this many prompt tokens through the whole decoder (TurnBudget of chunk · layers rows);
  // 0 = each prefill runs to its end. How many may be started at once is the process gate's
  // bound (--max-active-prefills, set on ProcessComputeGate by main).
  int prefill_chunk_tokens = 256;
  // > 0: requests that reach the prefill together run as one batched pass of the decoder
  // (PrefillBatcher) of at most this many prompt tokens (a longer prompt runs alone), instead of
  // one prefill at a time in slices (prefill_chunk_tokens then does not apply). 0 = off.
  int prefill_batch_tokens = 0;
  // Where the prefill's cache is in device memory another process can map (ModelOptions::
  // shareable_kv), hand it to decode on the device (KvHeader.device_handover) instead of sending
  // its rows; a replica that refuses (another device, no access) gets the rows, and is not asked
  // again. false: always the rows (--kv-handover stream).
  bool kv_handover = true;
  // Ask each decode replica for its free KV memory this often and pick the one with the most
  // (DecodeLoadPoller, KvReports); 0 = off, decode replicas by fewest calls in flight only.
  // A single address is polled only when names are re-resolved (peer_refresh_ms > 0), since it
  // may stand for several pods; a round with fewer than two replicas asks nothing.
  int64_t decode_poll_ms = 250;
  // Resolve the configured encoder and decode names this often and make each address they
  // resolve to (each pod behind a headless Service) a replica of its own (ReplicaSet::Refresh);
  // 0 = off: each configured address is one replica, and gRPC spreads calls over what its name
  // resolves to without the choice seeing the pods.
  int64_t peer_refresh_ms = 5000;
  // Credentials for the calls to hap-encoder and hap-decode; null = plaintext. Built from the
  // --peer-tls-* flags with rpc::MakeCredentials (which reports unreadable files at startup).
  std::shared_ptr<grpc::ChannelCredentials> peer_credentials;
  std::string peer_server_name;  // expected name in the peers' certificates, if not the address
};

// A request that passed the checks on receipt.
struct GenerateJob {
  std::string request_id;
  PruneRequest prune;
  SamplingParams sampling;
  StopCriteria stop;
  PromptText prompt;  // views the request's prompt or raw_prompt
  int visual_tokens = 0;  // what the image gives unpruned (from its header for Qwen2.5-VL)
};

class PrefillService final : public hap::v1::Generation::CallbackService {
 public:
  PrefillService(ServerState* state, WorkerPool* pool, KvRegistry* kv, const PrefillConfig& config);

  // Also gives the batcher the decoder's layers, for slicing its passes.
  void SetModel(const VisionLanguageModel* model);
  // Before serving: every Generate call then needs a bearer token `auth` accepts, and counts
  // against its client's limit. Null = no authentication.
  void SetAuth(TokenAuth* auth) { auth_ = auth; }

  grpc::ServerWriteReactor<hap::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* ctx, const hap::v1::GenerateRequest* request) override;

  // The checks every request passes before any work (InvalidArgument / ResourceExhausted /
  // Unavailable with a message naming the problem).
  absl::StatusOr<GenerateJob> Check(const hap::v1::GenerateRequest& request);

  ServerState* state() { return state_; }
  WorkerPool* pool() { return pool_; }
  KvRegistry* kv() { return kv_; }
  TokenAuth* auth() { return auth_; }
  const PrefillConfig& config() const { return config_; }
  const VisionLanguageModel* model() const { return model_.load(); }
  ReplicaSet<hap::v1::Encoder>& encoders() { return *encoders_; }
  ReplicaSet<hap::v1::Decode>& decoders() { return *decoders_; }
  // Null unless config().prefill_batch_tokens > 0.
  PrefillBatcher* batcher() { return batcher_.get(); }
  // Decode replicas that refused a device handover (KvAssembler): they get the rows.
  bool HandoverRefusedBy(const std::string& address) const;
  void NoteHandoverRefused(const std::string& address, const absl::Status& why);

 private:
  ServerState* state_;
  WorkerPool* pool_;
  KvRegistry* kv_;
  TokenAuth* auth_ = nullptr;
  const PrefillConfig config_;
  std::atomic<const VisionLanguageModel*> model_{nullptr};
  std::unique_ptr<ReplicaSet<hap::v1::Encoder>> encoders_;
  std::unique_ptr<ReplicaSet<hap::v1::Decode>> decoders_;
  std::unique_ptr<DecodeLoadPoller> decode_load_;  // after decoders_: stops before it goes
  std::unique_ptr<PeriodicTask> peer_refresh_;     // likewise
  std::unique_ptr<PrefillBatcher> batcher_;
  mutable std::mutex refused_mu_;
  std::set<std::string> handover_refused_;  // decode addresses
};

// A channel to a peer service: fast reconnects (a restarted peer is used again within about a
// second) and message limits that fit the transfer chunks.
// `authority` is the configured address `address` was resolved from (== address otherwise).
std::shared_ptr<grpc::Channel> PeerChannel(const std::string& address, const std::string& authority,
                                           const PrefillConfig& config);

}  // namespace hap::svc
