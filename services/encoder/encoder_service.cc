#include "services/encoder/encoder_service.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/compute_gate.h"
#include "base/status_macros.h"
#include "runtime/model/cancellation.h"
#include "runtime/model/pipeline.h"
#include "services/server/service_metrics.h"
#include "services/server/status.h"
#include "services/wire/embed_codec.h"
#include "services/wire/outbox_reactor.h"
#include "services/wire/proto_convert.h"
#include "telemetry/tracer.h"

namespace hap::svc {

// One Encode call: checked on receipt, then encoded on a worker thread.
class EncodeReactor final : public OutboxReactor<grpc::ServerWriteReactor<hap::v1::EncodeResponse>,
                                                 hap::v1::EncodeResponse> {
 public:
  EncodeReactor(EncoderService* service, grpc::CallbackServerContext* ctx,
                const hap::v1::EncodeRequest* request)
      : service_(service), request_(request) {
    StartRpc(*ctx, "hap.v1.Encoder/Encode");
    guard_ = service->state_->Begin(request->request_id());
    absl::StatusOr<WorkerPool::Ticket> ticket = Accept();
    if (!ticket.ok()) {
      Close(ToGrpc(ticket.status()));
      return;
    }
    service->pool_->Run(std::move(*ticket), [this](WorkerPool::Ticket* place) {
      const absl::Status status = Encode();
      place->Reset();  // free before the answer: a client that saw it may call again at once
      Close(ToGrpc(status));
    });
  }

 private:
  absl::StatusOr<WorkerPool::Ticket> Accept() {
    HAP_RETURN_IF_ERROR(service_->state_->CheckAccepting());
    model_ = service_->model_.load();
    if (request_->image().empty()) {
      return absl::InvalidArgumentError("image is empty (send JPEG or PNG bytes)");
    }
    if (static_cast<int64_t>(request_->image().size()) > service_->config_.max_image_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("image is ", request_->image().size(), " bytes; the limit is ",
                       service_->config_.max_image_bytes, " (--max-image-bytes)"));
    }
    // The image's visual tokens from its header: what a percentage budget is of.
    HAP_ASSIGN_OR_RETURN(const int visual_tokens, model_->VisualTokensOf(request_->image()));
    HAP_ASSIGN_OR_RETURN(prune_,
                         PruneFromProto(request_->pruning(), hap::v1::Pruning(), visual_tokens));
    HAP_RETURN_IF_ERROR(model_->EncodedTokens(prune_, visual_tokens).status());
    return service_->pool_->Admit();
  }

  absl::Status Encode() {
    if (cancelled()) return absl::CancelledError("cancelled before encoding");
    // hap.encode: the image → embeddings work of this call (not the streaming back).
    telemetry::Span span = telemetry::GlobalTracer().StartSpan("hap.encode", rpc_span());
    span.SetAttribute("hap.request_id", request_->request_id())
        .SetAttribute("hap.method", prune_.method)
        .SetAttribute("hap.image.bytes", request_->image().size());
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<EncodeResult> encoded;
    {
      // One encode at a time uses every core; a client that goes away mid-encode stops the
      // vision tower at its next layer.
      ComputeGate::Hold compute = ProcessComputeGate().Enter();
      ScopedCancellation scope([this] { return cancelled(); });
      encoded = model_->EncodeImage(request_->image(), prune_);
    }
    EncoderMetrics::Get().encode_seconds->Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (!encoded.ok()) {
      span.SetStatus(telemetry::StatusCode::kError, std::string(encoded.status().message()));
      return encoded.status();
    }
    EncodeResult r = std::move(*encoded);
    span.SetAttribute("hap.image.width", r.image_width)
        .SetAttribute("hap.image.height", r.image_height)
        .SetAttribute("hap.visual_tokens", r.n_vis)
        .SetAttribute("hap.preprocess_ms", r.preprocess_ms)
        .SetAttribute("hap.encode_ms", r.encode_ms);
    span.End();
    if (cancelled()) return absl::CancelledError("cancelled after encoding");
    const int hidden = model_->text_config().hidden_size;
    int limit = service_->config_.max_message_bytes;
    if (request_->max_message_bytes() > 0) {
      limit = std::min<int>(limit, static_cast<int>(request_->max_message_bytes()));
    }
    HAP_ASSIGN_OR_RETURN(std::vector<hap::v1::EmbeddingChunk> chunks,
                         ChunkEmbeddings(r.embeds, hidden, limit));
    hap::v1::EncodeResponse head;
    hap::v1::EmbeddingHeader* h = head.mutable_header();
    h->set_request_id(request_->request_id());
    h->set_n_tokens(r.n_vis);
    h->set_hidden(hidden);
    h->set_dtype(hap::v1::DTYPE_F32);
    h->set_n_chunks(static_cast<int>(chunks.size()));
    h->set_image_width(r.image_width);
    h->set_image_height(r.image_height);
    h->set_preprocess_ms(r.preprocess_ms);
    h->set_encode_ms(r.encode_ms);
    h->set_grid_t(r.grid.t);
    h->set_grid_h(r.grid.h);
    h->set_grid_w(r.grid.w);
    Send(std::move(head));
    for (hap::v1::EmbeddingChunk& c : chunks) {
      hap::v1::EncodeResponse msg;
      *msg.mutable_chunk() = std::move(c);
      if (!Send(std::move(msg))) return absl::CancelledError("the client went away");
    }
    return absl::OkStatus();
  }

  EncoderService* service_;
  const hap::v1::EncodeRequest* request_;
  const VisionLanguageModel* model_ = nullptr;
  PruneRequest prune_;
  ServerState::RequestGuard guard_;
};

grpc::ServerWriteReactor<hap::v1::EncodeResponse>* EncoderService::Encode(
    grpc::CallbackServerContext* ctx, const hap::v1::EncodeRequest* request) {
  return EncodeReactor::HandToGrpc(new EncodeReactor(this, ctx, request));
}

}  // namespace hap::svc
