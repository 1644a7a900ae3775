#include "services/decode/decode_service.h"

#include <chrono>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/timer.h"
#include "runtime/engine/decode_engine.h"
#include "runtime/model/generate.h"
#include "runtime/model/sampler.h"
#include "services/server/service_metrics.h"
#include "services/server/status.h"
#include "services/wire/kv_codec.h"
#include "services/wire/outbox_reactor.h"
#include "services/wire/proto_convert.h"
#include "telemetry/tracer.h"

namespace hap::svc {
namespace {

KvExpectation ExpectationOf(const LanguageModel& model) {
  const TextConfig& t = model.text_config();
  KvExpectation e;
  e.n_layers = t.num_hidden_layers;
  e.kv_dim = t.num_key_value_heads * t.head_dim;
  e.d_model = t.hidden_size;
  e.vocab_size = t.vocab_size;
  e.max_positions = t.max_position_embeddings;
  return e;
}

}  // namespace

// One Decode call. Reactions (gRPC threads) receive and check the cache; after the trailer a
// worker runs the decode loop and is then the only one that closes the call.
class DecodeReactor final
    : public OutboxReactor<grpc::ServerBidiReactor<hap::v1::DecodeRequest, hap::v1::DecodeResponse>,
                           hap::v1::DecodeResponse> {
 public:
  DecodeReactor(DecodeService* service, grpc::CallbackServerContext* ctx) : service_(service) {
    StartRpc(*ctx, "hap.v1.Decode/Decode");
    guard_ = service->state_->Begin("(awaiting KV header)");
    if (absl::Status s = service->state_->CheckAccepting(); !s.ok()) {
      Close(ToGrpc(s));
      return;
    }
    model_ = service->model_.load();
    // The rows land in the engine's KV blocks as they arrive, when it has them free.
    assembler_.emplace(ExpectationOf(*model_), service->engine_.load()->pool());
    order().Before(ReactionOrder::kRead);
    GrpcCode in_grpc;
    StartRead(&in_);
  }

  ~DecodeReactor() override { service_->kv_->Release(kv_); }

 private:
  enum class Phase { kHeader, kChunks, kDecoding, kFailed };

  void OnReadDone(bool ok) override {
    order().After(ReactionOrder::kRead);
    ReadDone(ok);
    order().Before(ReactionOrder::kDone);  // OnDone waits for this reaction to return
  }

  void ReadDone(bool ok) {
    if (!ok) {
      if (phase_ == Phase::kHeader || phase_ == Phase::kChunks) {
        Fail(absl::InvalidArgumentError(
            absl::StrCat("KV transfer: the stream ended before the trailer (",
                         assembler_->chunks_received(), " chunks received)")));
      }
      return;  // after the trailer: the client half-closed, which is normal
    }
    if (phase_ == Phase::kDecoding) {
      // Nothing may follow the trailer; the worker sees the flag, stops and reports it.
      std::lock_guard<std::mutex> lock(mu_);
      protocol_error_ = "KV transfer: a message arrived after the trailer";
      return;
    }
    if (absl::Status s = Receive(); !s.ok()) {
      Fail(s);
      return;
    }
    order().Before(ReactionOrder::kRead);
    GrpcCode in_grpc;
    StartRead(&in_);
  }

  absl::Status Receive() {
    if (phase_ == Phase::kHeader) {
      if (!in_.has_header()) {
        return absl::InvalidArgumentError(
            "KV transfer: the first message must be a KvHeader (got a chunk or trailer)");
      }
      HAP_RETURN_IF_ERROR(assembler_->OnHeader(in_.header()));
      const hap::v1::KvHeader& h = assembler_->header();
      guard_.Rename(h.request_id());
      HAP_ASSIGN_OR_RETURN(ticket_, service_->pool_->Admit());
      HAP_ASSIGN_OR_RETURN(
          kv_, service_->kv_->Acquire(h.request_id(), assembler_->expected_bytes(),
                                      service_->config_.lease_ms, [this] { OnLeaseExpired(); }));
      header_time_ = Clock::now();
      phase_ = Phase::kChunks;
      return absl::OkStatus();
    }
    switch (in_.kind_case()) {
      case hap::v1::DecodeRequest::kChunk:
        return assembler_->OnChunk(in_.chunk());
      case hap::v1::DecodeRequest::kTrailer:
        HAP_RETURN_IF_ERROR(assembler_->OnTrailer(in_.trailer()));
        return StartDecoding();
      case hap::v1::DecodeRequest::kHeader:
        return absl::InvalidArgumentError("KV transfer: a second header arrived");
      default:
        return absl::InvalidArgumentError("KV transfer: an empty DecodeRequest arrived");
    }
  }

  absl::Status StartDecoding() {
    if (!service_->kv_->EndLease(kv_)) {
      return absl::DeadlineExceededError("KV transfer: the lease expired");
    }
    kv_bytes_ = assembler_->bytes_received();
    kv_chunks_ = assembler_->chunks_received();
    DecodeMetrics::Get().kv_received_bytes->Inc(static_cast<double>(kv_bytes_));
    hap::v1::DecodeResponse ack;
    ack.mutable_ack()->set_kv_bytes(assembler_->bytes_received());
    ack.mutable_ack()->set_n_chunks(assembler_->chunks_received());
    ack.mutable_ack()->set_transfer_ms(MsSince(header_time_));
    Send(std::move(ack));
    phase_ = Phase::kDecoding;
    trailer_time_ = Clock::now();
    return SubmitDecode();
  }

  // Only on reaction threads before the worker exists.
  void Fail(const absl::Status& status) {
    phase_ = Phase::kFailed;
    service_->kv_->Release(kv_);
    assembler_.reset();
    ticket_.Reset();
    Close(ToGrpc(status));
  }

  // On the registry's thread: the cache never completed. Memory goes when the call ends.
  void OnLeaseExpired() {
    Close(grpc::Status(
        grpc::StatusCode::DEADLINE_EXCEEDED,
        absl::StrCat("KV transfer did not complete within the ", service_->config_.lease_ms,
                     " ms lease; the partial cache was freed")));
  }

  bool ShouldStop() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled() || !protocol_error_.empty();
  }

  // Hands the sequence to the batching engine; from here the engine thread owns the call and is
  // the only one that closes it (in the job's done callback).
  absl::Status SubmitDecode() {
    const hap::v1::KvHeader header = assembler_->header();
    HAP_ASSIGN_OR_RETURN(SamplingParams params, SamplingFromProto(header.sampling()));
    HAP_ASSIGN_OR_RETURN(stop_, StopFromProto(header.max_new_tokens(), header.stop()));
    // hap.decode: the decode of this call (the KV cache has arrived), batched with the others.
    span_ = telemetry::GlobalTracer().StartSpan("hap.decode", rpc_span());
    span_.SetAttribute("hap.kv.bytes_received", kv_bytes_)
        .SetAttribute("hap.kv.chunks_received", kv_chunks_);
    DecodeJob job;
    job.cache = assembler_->TakeCache();
    job.paged = assembler_->TakePaged();
    assembler_.reset();
    job.first_token = header.first_token();
    // The sampler prefill used, continued: same seed, with its draws skipped.
    job.sampler = Sampler(params);
    job.sampler.Discard(header.samples_drawn());
    job.stop = stop_;
    eos_ = model_->tokenizer().eos_id();
    cfg_eos_ = model_->text_config().eos_token_id;
    // TokenStream calls the sink once per sampled token (never for EOS) and, when the answer
    // ends by EOS or length, once more to flush held-back text: that call repeats the last id
    // (EOS, or the max_new_tokens-th token), so it carries no token id here.
    job.sink = [this](int32_t token, const std::string& text) {
      if (ShouldStop()) return false;
      if (!t_first_) {
        t_first_ = Clock::now();
        span_.SetAttribute("hap.queue_ms", MsBetween(trailer_time_, *t_first_));
      }
      hap::v1::DecodeResponse msg;
      hap::v1::TextDelta* delta = msg.mutable_delta();
      delta->set_text(text);
      const bool flush = sampled_ == stop_.max_new_tokens || token == eos_ || token == cfg_eos_;
      if (!flush) {
        delta->add_token_ids(token);
        ++sampled_;
      }
      return Send(std::move(msg));
    };
    job.should_stop = [this] { return ShouldStop(); };
    job.done = [this](absl::StatusOr<DecodeResult> result) {
      absl::Status status = Finish(std::move(result));
      if (!status.ok()) {
        span_.SetStatus(telemetry::StatusCode::kError, std::string(status.message()));
      }
      span_ = telemetry::Span();
      service_->kv_->Release(kv_);
      ticket_.Reset();
      Close(ToGrpc(status));
    };
    t_start_ = Clock::now();
    service_->engine_.load()->Submit(std::move(job));
    return absl::OkStatus();
  }

  absl::Status Finish(absl::StatusOr<DecodeResult> result) {
    DecodeMetrics& metrics = DecodeMetrics::Get();
    metrics.decode_tokens->Inc(sampled_);
    metrics.decode_seconds->Observe(std::chrono::duration<double>(Clock::now() - t_start_).count());
    span_.SetAttribute("hap.decode.tokens", sampled_);
    if (t_first_) {
      span_.SetAttribute("hap.decode.time_to_first_token_ms", MsBetween(t_start_, *t_first_));
    }
    HAP_RETURN_IF_ERROR(result.status());
    const int n_tokens = static_cast<int>(result->tokens.size());
    span_.SetAttribute("gen_ai.usage.output_tokens", n_tokens)
        .SetAttribute("gen_ai.response.finish_reasons",
                      std::vector<std::string>{std::string(FinishReasonName(result->finish))})
        .SetAttribute("hap.decode.ms", result->decode_ms)
        .SetAttribute("hap.decode.tokens_per_s", n_tokens > 1 && result->decode_ms > 0
                                                     ? (n_tokens - 1) / (result->decode_ms / 1e3)
                                                     : 0.0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!protocol_error_.empty()) return absl::InvalidArgumentError(protocol_error_);
    }
    if (cancelled()) return absl::CancelledError("the client cancelled");
    hap::v1::DecodeResponse done;
    hap::v1::DecodeDone* d = done.mutable_done();
    d->set_finish_reason(FinishToProto(result->finish));
    d->mutable_token_ids()->Add(result->tokens.begin(), result->tokens.end());
    d->set_text(result->text);
    d->set_decode_ms(result->decode_ms);
    d->set_queue_ms(t_first_ ? MsBetween(trailer_time_, *t_first_) : MsSince(trailer_time_));
    Send(std::move(done));
    return absl::OkStatus();
  }

  DecodeService* service_;
  const LanguageModel* model_ = nullptr;
  ServerState::RequestGuard guard_;
  hap::v1::DecodeRequest in_;
  Phase phase_ = Phase::kHeader;  // reaction threads only, then the worker
  std::optional<KvAssembler> assembler_;
  WorkerPool::Ticket ticket_;
  KvRegistry::Handle kv_;
  Clock::time_point header_time_, trailer_time_, t_start_;
  std::optional<Clock::time_point> t_first_;  // engine thread only
  telemetry::Span span_;
  StopCriteria stop_;
  int32_t eos_ = -1, cfg_eos_ = -1;
  int sampled_ = 0;  // engine thread only
  int64_t kv_bytes_ = 0;
  int kv_chunks_ = 0;
  std::mutex mu_;
  std::string protocol_error_;
};

grpc::ServerBidiReactor<hap::v1::DecodeRequest, hap::v1::DecodeResponse>* DecodeService::Decode(
    grpc::CallbackServerContext* ctx) {
  return DecodeReactor::HandToGrpc(new DecodeReactor(this, ctx));
}

}  // namespace hap::svc
