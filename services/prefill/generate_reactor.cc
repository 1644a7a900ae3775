#include "services/prefill/generate_reactor.h"

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/common/status_macros.h"
#include "runtime/model/cancellation.h"
#include "services/common/convert.h"
#include "services/common/embed_codec.h"
#include "services/common/kv_codec.h"
#include "services/common/status.h"

namespace hap::svc {
namespace {

using Clock = std::chrono::steady_clock;

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The pruning exactly as resolved here, for the encoder (VisionZip needs the budget).
hap::v1::Pruning ResolvedPruning(const PruneRequest& prune) {
  hap::v1::Pruning p;
  p.set_method(prune.method);
  p.set_seed(prune.seed);
  if (prune.retain) p.set_retain(absl::StrFormat("%.17g", *prune.retain));
  if (prune.flops) p.set_flops(*prune.flops);
  return p;
}

// A peer's failure as the client should see it: a peer that is down is UNAVAILABLE; a peer
// rejecting what this server built is this server's fault (INTERNAL), not the client's.
absl::Status PeerError(const char* peer, const std::string& address, const grpc::Status& st,
                       bool client_input) {
  const absl::Status s = FromGrpc(st);
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
      return absl::UnavailableError(
          absl::StrCat(peer, " service at ", address, " is unavailable: ", s.message()));
    case absl::StatusCode::kInvalidArgument:
      if (!client_input) {
        return absl::InternalError(absl::StrCat(peer, " rejected this request: ", s.message()));
      }
      return Annotate(s, peer);
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kDeadlineExceeded:
      return s;
    default:
      return Annotate(s, peer);
  }
}

}  // namespace

void ChildCalls::Add(grpc::ClientContext* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_) ctx->TryCancel();
  calls_.insert(ctx);
}

void ChildCalls::Remove(grpc::ClientContext* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.erase(ctx);
}

void ChildCalls::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  for (grpc::ClientContext* c : calls_) c->TryCancel();
}

GenerateReactor::GenerateReactor(PrefillService* service, grpc::CallbackServerContext* ctx,
                                 const hap::v1::GenerateRequest* request)
    : service_(service), ctx_(ctx), request_(request), received_(Clock::now()) {
  guard_ = service->state()->Begin(request->request_id());
  absl::StatusOr<GenerateJob> job = service->Check(*request);
  if (!job.ok()) {
    Close(ToGrpc(job.status()));
    return;
  }
  job_ = std::move(*job);
  guard_ = service->state()->Begin(job_.request_id);
  absl::StatusOr<WorkerPool::Ticket> ticket = service->pool()->Admit();
  if (!ticket.ok()) {
    Close(ToGrpc(ticket.status()));
    return;
  }
  service->pool()->Run(std::move(*ticket), [this] { Close(ToGrpc(Execute())); });
}

absl::Status GenerateReactor::CheckCancelled(const char* stage) const {
  if (cancelled()) return absl::CancelledError(absl::StrCat("cancelled ", stage));
  return absl::OkStatus();
}

absl::Status GenerateReactor::Execute() {
  timings_.set_queue_ms(MsBetween(received_, Clock::now()));
  HAP_RETURN_IF_ERROR(CheckCancelled("while queued"));
  HAP_ASSIGN_OR_RETURN(EncodeResult encoded, CallEncoder());
  HAP_RETURN_IF_ERROR(CheckCancelled("after encoding"));
  Sampler sampler(job_.sampling);
  absl::StatusOr<PrefillResult> prefill;
  {
    // A cancelled request stops between decoder layers instead of finishing its prefill.
    ScopedCancellation scope([this] { return cancelled(); });
    prefill = RunPrefill(*service_->model(), request_->prompt(), encoded, job_.prune, &sampler);
  }
  if (!prefill.ok()) return prefill.status();
  HAP_RETURN_IF_ERROR(CheckCancelled("after prefill"));
  return TransferAndRelay(std::move(*prefill));
}

absl::StatusOr<EncodeResult> GenerateReactor::CallEncoder() {
  const auto t0 = Clock::now();
  const LlavaModel& model = *service_->model();
  std::unique_ptr<grpc::ClientContext> ctx = grpc::ClientContext::FromCallbackServerContext(*ctx_);
  children_.Add(ctx.get());
  absl::Cleanup remove = [&] { children_.Remove(ctx.get()); };

  hap::v1::EncodeRequest req;
  req.set_request_id(job_.request_id);
  req.set_image(request_->image());
  *req.mutable_pruning() = ResolvedPruning(job_.prune);
  req.set_max_message_bytes(service_->config().max_message_bytes);
  std::unique_ptr<grpc::ClientReader<hap::v1::EncodeResponse>> reader =
      service_->encoder()->Encode(ctx.get(), req);
  EmbeddingAssembler assembler(model.config().text.hidden_size, model.config().num_visual_tokens());
  hap::v1::EncodeResponse msg;
  absl::Status stream_error;
  while (stream_error.ok() && reader->Read(&msg)) {
    stream_error =
        msg.has_header() ? assembler.OnHeader(msg.header()) : assembler.OnChunk(msg.chunk());
  }
  if (!stream_error.ok()) ctx->TryCancel();
  const grpc::Status st = reader->Finish();
  HAP_RETURN_IF_ERROR(stream_error);
  if (!st.ok()) {
    return PeerError("encoder", service_->config().encoder_address, st, /*client_input=*/true);
  }
  EncodeResult r;
  HAP_ASSIGN_OR_RETURN(r.embeds, assembler.Finish());
  const hap::v1::EmbeddingHeader& h = assembler.header();
  r.n_vis = h.n_tokens();
  r.image_width = h.image_width();
  r.image_height = h.image_height();
  r.preprocess_ms = h.preprocess_ms();
  r.encode_ms = h.encode_ms();
  int expected = model.config().num_visual_tokens();
  if (job_.prune.method == "visionzip") {
    HAP_ASSIGN_OR_RETURN(VisionZipCounts zip,
                         VisionZipCountsFor(job_.prune, DimsOf(model.config())));
    if (zip.enabled()) expected = zip.total();
  }
  if (r.n_vis != expected) {
    return absl::InternalError(absl::StrCat("encoder returned ", r.n_vis, " visual tokens; ",
                                            expected, " were expected for method ",
                                            job_.prune.method));
  }
  timings_.set_preprocess_ms(r.preprocess_ms);
  timings_.set_encode_ms(r.encode_ms);
  timings_.set_encode_rpc_ms(MsBetween(t0, Clock::now()));
  return r;
}

absl::Status GenerateReactor::TransferAndRelay(PrefillResult prefill) {
  const LlavaModel& model = *service_->model();
  const PrefillConfig& config = service_->config();
  KvRegistry* kv = service_->kv();
  std::unique_ptr<grpc::ClientContext> ctx = grpc::ClientContext::FromCallbackServerContext(*ctx_);
  children_.Add(ctx.get());
  absl::Cleanup remove = [&] { children_.Remove(ctx.get()); };

  // The cache is leased until decode acknowledges it; a stalled transfer is cancelled.
  std::atomic<bool> lease_expired{false};
  HAP_ASSIGN_OR_RETURN(KvRegistry::Handle lease,
                       kv->Acquire(job_.request_id, prefill.cache.bytes(), config.lease_ms, [&] {
                         lease_expired = true;
                         ctx->TryCancel();
                       }));
  absl::Cleanup release = [&] { kv->Release(lease); };
  HAP_ASSIGN_OR_RETURN(KvChunker chunker,
                       KvChunker::Create(&prefill.cache, config.max_message_bytes));

  const auto t_transfer = Clock::now();
  std::unique_ptr<grpc::ClientReaderWriter<hap::v1::DecodeRequest, hap::v1::DecodeResponse>>
      stream = service_->decode()->Decode(ctx.get());
  hap::v1::DecodeRequest out;
  hap::v1::KvHeader* h = out.mutable_header();
  chunker.FillHeader(h);
  h->set_request_id(job_.request_id);
  h->set_d_model(model.config().text.hidden_size);
  h->set_vocab_size(model.config().text.vocab_size);
  h->set_first_token(prefill.first_token);
  *h->mutable_sampling() = SamplingToProto(job_.sampling);
  h->set_samples_drawn(1);
  h->set_max_new_tokens(job_.stop.max_new_tokens);
  for (const std::string& s : job_.stop.stop_strings) h->add_stop(s);
  bool ok = stream->Write(out);
  while (ok && chunker.Next(out.mutable_chunk())) ok = stream->Write(out);
  if (ok) {
    chunker.FillTrailer(out.mutable_trailer());
    ok = stream->Write(out);
  }
  if (ok) stream->WritesDone();
  out.Clear();

  hap::v1::DecodeResponse in;
  hap::v1::GenerateStats stats;
  bool acked = false, done = false, client_gone = false, first = true;
  while (stream->Read(&in)) {
    if (in.has_ack()) {
      acked = true;
      kv->EndLease(lease);
      stats.set_kv_bytes_received(in.ack().kv_bytes());
      stats.set_kv_chunks(in.ack().n_chunks());
      timings_.set_kv_transfer_ms(MsBetween(t_transfer, Clock::now()));
      prefill.cache = KvCache();  // decode has it now
      kv->Release(lease);
    } else if (in.has_delta()) {
      if (first) {
        first = false;
        timings_.set_ttft_ms(MsBetween(received_, Clock::now()));
      }
      hap::v1::GenerateResponse msg;
      *msg.mutable_delta() = std::move(*in.mutable_delta());
      if (!Send(std::move(msg))) {
        client_gone = true;
        ctx->TryCancel();
        break;
      }
    } else if (in.has_done()) {
      done = true;
      const hap::v1::DecodeDone& d = in.done();
      stats.set_finish_reason(d.finish_reason());
      stats.mutable_token_ids()->CopyFrom(d.token_ids());
      stats.set_text(d.text());
      timings_.set_decode_ms(d.decode_ms());
    }
  }
  const grpc::Status st = stream->Finish();
  if (lease_expired) {
    return absl::DeadlineExceededError(absl::StrCat(
        "KV transfer to decode did not complete within the ", config.lease_ms, " ms lease"));
  }
  HAP_RETURN_IF_ERROR(CheckCancelled("while decoding"));
  if (client_gone) return absl::CancelledError("the client went away");
  if (!st.ok()) return PeerError("decode", config.decode_address, st, /*client_input=*/false);
  if (!acked || !done) return absl::InternalError("decode ended the call without its results");

  const PrefillStats& p = prefill.stats;
  stats.set_request_id(job_.request_id);
  stats.set_method(p.method);
  stats.set_budget(BudgetString(job_.prune));
  stats.set_prompt_tokens(p.prompt_tokens);
  stats.set_text_tokens(p.text_tokens);
  stats.set_visual_tokens(p.visual_tokens);
  stats.set_image_visual_tokens(p.image_visual_tokens);
  stats.mutable_layer_visual_tokens()->Add(p.layer_visual_tokens.begin(),
                                           p.layer_visual_tokens.end());
  for (const PruneStage& s : p.stages) {
    hap::v1::PruneStage* ps = stats.add_stages();
    ps->set_after_layer(s.after_layer);
    ps->set_tokens_before(s.tokens_before);
    ps->set_tokens_kept(s.tokens_kept);
  }
  stats.set_average_visual_tokens(p.average_visual_tokens);
  hap::v1::Flops* f = stats.mutable_flops();
  f->set_paper(p.flops_paper);
  f->set_full(p.flops_full);
  f->set_unpruned_paper(p.unpruned_flops_paper);
  f->set_unpruned_full(p.unpruned_flops_full);
  stats.set_kv_bytes(p.kv_bytes);
  stats.set_kv_bytes_unpruned(p.kv_bytes_unpruned);
  timings_.set_prefill_ms(p.prefill_ms);
  timings_.set_score_select_ms(p.score_select_ms);
  timings_.set_prefill_tokens_per_s(p.prefill_ms > 0 ? p.prompt_tokens / (p.prefill_ms / 1e3) : 0);
  const int n_tok = stats.token_ids_size();
  timings_.set_decode_tokens_per_s(
      n_tok > 1 && timings_.decode_ms() > 0 ? (n_tok - 1) / (timings_.decode_ms() / 1e3) : 0);
  timings_.set_total_ms(MsBetween(received_, Clock::now()));
  *stats.mutable_timings() = timings_;
  hap::v1::GenerateResponse last;
  *last.mutable_stats() = std::move(stats);
  Send(std::move(last));
  return absl::OkStatus();
}

}  // namespace hap::svc
