// hap.v1.Encoder: image bytes → the family's preprocessing (LLaVA: CLIP's square; Qwen2.5-VL: the
// image's own resolution) → vision tower (→ VisionZip) → projector or merger → visual
// embeddings, streamed to prefill in checksummed row chunks.
#pragma once

#include <atomic>
#include <cstdint>

#include "hap/v1/encoder.grpc.pb.h"
#include "runtime/model/vision_language_model.h"
#include "services/server/server_state.h"
#include "services/server/service_metrics.h"
#include "services/server/worker_pool.h"

namespace hap::svc {

struct EncoderConfig {
  int max_message_bytes = 4 << 20;
  int64_t max_image_bytes = 16 << 20;
};

class EncoderService final : public hap::v1::Encoder::CallbackService {
 public:
  EncoderService(ServerState* state, WorkerPool* pool, const EncoderConfig& config)
      : state_(state), pool_(pool), config_(config) {
    EncoderMetrics::Get();  // on /metrics from the start
  }

  // Called once the model is loaded (requests before get UNAVAILABLE).
  void SetModel(const VisionLanguageModel* model) { model_ = model; }

  grpc::ServerWriteReactor<hap::v1::EncodeResponse>* Encode(
      grpc::CallbackServerContext* ctx, const hap::v1::EncodeRequest* request) override;

 private:
  friend class EncodeReactor;
  ServerState* state_;
  WorkerPool* pool_;
  const EncoderConfig config_;
  std::atomic<const VisionLanguageModel*> model_{nullptr};
};

}  // namespace hap::svc
