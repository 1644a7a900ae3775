// hap.v1.Decode: receives a request's compacted KV cache from prefill (checked message by
// message), then continues generation exactly where prefill left off and streams the tokens.
#pragma once

#include <atomic>
#include <cstdint>

#include "hap/v1/decode.grpc.pb.h"
#include "runtime/engine/decode_engine.h"
#include "runtime/model/language_model.h"
#include "services/server/server_state.h"
#include "services/server/service_metrics.h"
#include "services/server/worker_pool.h"
#include "services/wire/kv_registry.h"

namespace hap::svc {

struct DecodeConfig {
  // A transfer must finish this long after its header, or the partial cache is freed and the
  // call ends with DEADLINE_EXCEEDED.
  int64_t lease_ms = 30000;
};

class DecodeService final : public hap::v1::Decode::CallbackService {
 public:
  DecodeService(ServerState* state, WorkerPool* pool, KvRegistry* kv, const DecodeConfig& config)
      : state_(state), pool_(pool), kv_(kv), config_(config) {
    DecodeMetrics::Get();  // on /metrics from the start
    SampledRowsMetrics::Get();
  }

  // The model and the engine that batches every call's decode steps (set once loaded).
  void SetModel(const LanguageModel* model, DecodeEngine* engine) {
    engine_ = engine;
    model_ = model;
  }

  grpc::ServerBidiReactor<hap::v1::DecodeRequest, hap::v1::DecodeResponse>* Decode(
      grpc::CallbackServerContext* ctx) override;

 private:
  friend class DecodeReactor;
  ServerState* state_;
  WorkerPool* pool_;
  KvRegistry* kv_;
  const DecodeConfig config_;
  std::atomic<const LanguageModel*> model_{nullptr};
  std::atomic<DecodeEngine*> engine_{nullptr};
};

}  // namespace hap::svc
