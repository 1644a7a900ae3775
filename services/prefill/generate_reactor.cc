#include "services/prefill/generate_reactor.h"

#include <cstdio>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/compute_gate.h"
#include "base/status_macros.h"
#include "base/timer.h"
#include "runtime/model/cancellation.h"
#include "services/prefill/prefill_batcher.h"
#include "services/prefill/prefill_telemetry.h"
#include "services/server/service_metrics.h"
#include "services/server/status.h"
#include "services/wire/embed_codec.h"
#include "services/wire/kv_codec.h"
#include "services/wire/proto_convert.h"
#include "telemetry/rpc.h"
#include "telemetry/tracer.h"

namespace hap::svc {
namespace {

// The pruning exactly as resolved here, for the encoder (VisionZip needs the budget).
hap::v1::Pruning ResolvedPruning(const PruneRequest& prune) {
  hap::v1::Pruning p;
  p.set_method(prune.method);
  p.set_seed(prune.seed);
  if (prune.paq_temperature != 1.0) p.set_paq_temperature(prune.paq_temperature);
  if (prune.retain) p.set_retain(absl::StrFormat("%.17g", *prune.retain));
  if (prune.flops) p.set_flops(*prune.flops);
  return p;
}

// Calls to one peer for one request, the first included: a replica unavailable before it took
// anything of the request is replaced by another up to this many times less one.
constexpr int kMaxPeerAttempts = 3;

const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

// Makes one call to a peer (one of `replicas`) through `once(avoid, &address, &retryable)` until it
// succeeds, fails in a way another replica would not mend, or kMaxPeerAttempts calls were made;
// each retry passes over the replica the last call failed on, counts on `retries` and says so on
// stderr. `attempts_attr` on `span` records the calls made.
template <typename Result, typename Set, typename Once>
Result CallReplicas(const Set& replicas, telemetry::Counter* retries, telemetry::Span& span,
                    const char* attempts_attr, const std::string& request_id, Once once) {
  std::string avoid;
  for (int n = 1;; ++n) {
    std::string address;
    bool retryable = false;
    Result r = once(avoid, &address, &retryable);
    span.SetAttribute(attempts_attr, n);
    if (r.ok() || !retryable || n == kMaxPeerAttempts || replicas.size() < 2) return r;
    retries->Inc();
    std::fprintf(stderr, "hap-prefill: request '%s': %s; asking another replica\n",
                 absl::CHexEscape(request_id).c_str(), std::string(StatusOf(r).message()).c_str());
    avoid = address;
  }
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
    : OutboxReactor(service->config().max_stream_queue),
      service_(service),
      ctx_(ctx),
      request_(request),
      received_(Clock::now()) {
  StartRpc(*ctx, "hap.v1.Generation/Generate");
  guard_ = service->state()->Begin(request->request_id());
  // The token first: a caller without one learns nothing about its request.
  TokenAuth* auth = service->auth();
  std::string client_id;
  if (auth != nullptr) {
    absl::StatusOr<std::string> client = auth->Authenticate(*ctx);
    if (!client.ok()) {
      End(client.status());
      return;
    }
    client_id = std::move(*client);
    mutable_rpc_span().SetAttribute("enduser.id", client_id);
  }
  absl::StatusOr<GenerateJob> job = service->Check(*request);
  if (!job.ok()) {
    End(job.status());
    return;
  }
  job_ = std::move(*job);
  guard_.Rename(job_.request_id);
  telemetry::Span& span = mutable_rpc_span();
  if (span.recording()) {
    const std::string& dir = service->model()->dir();
    span.SetAttribute("gen_ai.operation.name", "generate_content")
        .SetAttribute("gen_ai.provider.name", "hap")
        .SetAttribute("gen_ai.request.model", dir.substr(dir.find_last_of('/') + 1))
        .SetAttribute("gen_ai.request.max_tokens", job_.stop.max_new_tokens)
        .SetAttribute("gen_ai.request.temperature", job_.sampling.temperature)
        .SetAttribute("gen_ai.request.top_p", job_.sampling.top_p)
        .SetAttribute("gen_ai.request.top_k", job_.sampling.top_k)
        .SetAttribute("gen_ai.request.seed", static_cast<int64_t>(job_.sampling.seed))
        .SetAttribute("gen_ai.response.id", job_.request_id)
        .SetAttribute("hap.request_id", job_.request_id)
        .SetAttribute("hap.method", job_.prune.method)
        .SetAttribute("hap.budget", BudgetString(job_.prune))
        .SetAttribute("hap.image.bytes", request->image().size());
  }
  // The client's own limit before the server's: one busy client cannot fill the queue.
  if (auth != nullptr) {
    absl::StatusOr<ClientSlot> slot = auth->Admit(client_id);
    if (!slot.ok()) {
      End(slot.status());
      return;
    }
    client_slot_ = std::move(*slot);
  }
  absl::StatusOr<WorkerPool::Ticket> ticket = service->pool()->Admit();
  if (!ticket.ok()) {
    End(ticket.status());
    return;
  }
  service->pool()->Run(std::move(*ticket), [this](WorkerPool::Ticket* place) {
    const absl::Status status = Execute();
    place->Reset();  // free before the answer: a client that saw it may call again at once
    End(status);
  });
}

void GenerateReactor::End(const absl::Status& status) {
  client_slot_.Release();
  Close(ToGrpc(status));  // the last use of `this`
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
  std::vector<Clock::time_point> layer_starts;  // the decoder polls the check once per layer
  int turn_yields = 0;      // slices handed to waiting prefills
  double turn_wait_ms = 0;  // and the time waited for them
  auto t_prefill = Clock::now();
  auto t_prefill_end = t_prefill;
  int batch_jobs = 0;  // requests in this one's batched pass (0: not batched)
  if (PrefillBatcher* batcher = service_->batcher()) {
    // Prefilled with the requests that reach this point about the same time, in one pass.
    HAP_ASSIGN_OR_RETURN(PromptTokens tokens, service_->model()->Tokenize(job_.prompt, encoded));
    PrefillJob job;
    job.prompt = &job_.prompt;
    job.encoded = &encoded;
    job.prune = job_.prune;
    job.sampler = &sampler;
    job.cancelled = [this] { return cancelled(); };  // leaves the queue, or the pass
    PrefillBatcher::Pass pass;
    prefill = batcher->Run(job, static_cast<int64_t>(tokens.ids.size()), &pass);
    HAP_RETURN_IF_ERROR(CheckCancelled("while waiting to prefill"));
    if (pass.jobs > 0) {
      t_prefill = pass.start;
      t_prefill_end = pass.end;
      batch_jobs = pass.jobs;
      turn_yields = pass.yields;
      turn_wait_ms = pass.yield_wait_ms;
    }
  } else {
    // One prefill at a time uses every core (waiting ones hold no core), in slices: after each
    // slice of layers this one hands the compute to the prefills waiting behind it, so a short
    // prompt does not wait for all of a long one. A cancelled request stops between decoder
    // layers instead of finishing its prefill.
    ComputeGate::Hold compute = ProcessComputeGate().Enter();
    HAP_RETURN_IF_ERROR(CheckCancelled("while waiting to prefill"));
    t_prefill = Clock::now();
    const VisionLanguageModel& model = *service_->model();
    TurnBudget turns(&compute, int64_t{service_->config().prefill_chunk_tokens} *
                                   model.text_config().num_hidden_layers);
    ScopedTurnHook slices([&turns](int64_t rows) { turns.Spend(rows); });
    ScopedCancellation scope([this, &layer_starts] {
      layer_starts.push_back(Clock::now());
      return cancelled();
    });
    prefill = model.RunPrefill(job_.prompt, encoded, job_.prune, &sampler);
    t_prefill_end = Clock::now();
    turn_yields = turns.yields();
    turn_wait_ms = turns.waited_ms();
  }
  if (turn_yields > 0) PrefillMetrics::Get().prefill_yields->Inc(turn_yields);
  if (!prefill.ok()) {
    telemetry::Span failed = telemetry::GlobalTracer().StartSpan("hap.prefill", rpc_span(),
                                                                 telemetry::SpanKind::kInternal,
                                                                 telemetry::ToUnixNanos(t_prefill));
    failed.SetStatus(telemetry::StatusCode::kError, std::string(prefill.status().message()));
    return prefill.status();
  }
  RecordPrefill(rpc_span(), *prefill, job_.prune, t_prefill, t_prefill_end, layer_starts,
                {turn_yields, turn_wait_ms}, batch_jobs);
  mutable_rpc_span().SetAttribute("gen_ai.usage.input_tokens", prefill->stats.prompt_tokens);
  HAP_RETURN_IF_ERROR(CheckCancelled("after prefill"));
  return TransferAndRelay(std::move(*prefill));
}

absl::StatusOr<EncodeResult> GenerateReactor::CallEncoder() {
  return CallReplicas<absl::StatusOr<EncodeResult>>(
      service_->encoders(), PrefillMetrics::Get().encoder_retries, mutable_rpc_span(),
      "hap.encoder.attempts", job_.request_id,
      [&](const std::string& avoid, std::string* address, bool* retryable) {
        return CallEncoderOnce(avoid, address, retryable);
      });
}

absl::StatusOr<EncodeResult> GenerateReactor::CallEncoderOnce(const std::string& avoid,
                                                              std::string* address,
                                                              bool* retryable) {
  const auto t0 = Clock::now();
  const VisionLanguageModel& model = *service_->model();
  // The rows this image gives under this request's pruning, counted on receipt: the stream may
  // hold no more.
  HAP_ASSIGN_OR_RETURN(const int expected, model.EncodedTokens(job_.prune, job_.visual_tokens));
  std::unique_ptr<grpc::ClientContext> ctx = grpc::ClientContext::FromCallbackServerContext(*ctx_);
  children_.Add(ctx.get());
  absl::Cleanup remove = [&] { children_.Remove(ctx.get()); };

  const ReplicaSet<hap::v1::Encoder>::Lease encoder = service_->encoders().Pick(0, avoid);
  *address = encoder.address();
  telemetry::ClientRpc call(rpc_span().context(), "hap.v1.Encoder/Encode", encoder.address(),
                            ctx.get());
  hap::v1::EncodeRequest req;
  req.set_request_id(job_.request_id);
  req.set_image(request_->image());
  *req.mutable_pruning() = ResolvedPruning(job_.prune);
  req.set_max_message_bytes(service_->config().max_message_bytes);
  std::unique_ptr<grpc::ClientReader<hap::v1::EncodeResponse>> reader =
      encoder.stub()->Encode(ctx.get(), req);
  EmbeddingAssembler assembler(model.text_config().hidden_size, expected);
  hap::v1::EncodeResponse msg;
  absl::Status stream_error;
  bool received = false;
  while (stream_error.ok() && reader->Read(&msg)) {
    received = true;
    stream_error =
        msg.has_header() ? assembler.OnHeader(msg.header()) : assembler.OnChunk(msg.chunk());
  }
  if (!stream_error.ok()) ctx->TryCancel();
  const grpc::Status st = reader->Finish();
  call.Finish(stream_error.ok() ? st : ToGrpc(stream_error));
  HAP_RETURN_IF_ERROR(stream_error);
  if (!st.ok()) {
    *retryable = st.error_code() == grpc::StatusCode::UNAVAILABLE && !received;
    return PeerError("encoder", encoder.address(), st, /*client_input=*/true);
  }
  EncodeResult r;
  HAP_ASSIGN_OR_RETURN(r.embeds, assembler.Finish());
  const hap::v1::EmbeddingHeader& h = assembler.header();
  r.n_vis = h.n_tokens();
  r.image_width = h.image_width();
  r.image_height = h.image_height();
  r.preprocess_ms = h.preprocess_ms();
  r.encode_ms = h.encode_ms();
  r.grid = ImageGrid{h.grid_t(), h.grid_h(), h.grid_w()};
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

void GenerateReactor::DecodeCall::Expire() {
  std::lock_guard<std::mutex> lock(mu);
  lease_expired = true;
  if (ctx != nullptr) ctx->TryCancel();
}

void GenerateReactor::DecodeCall::Set(grpc::ClientContext* c) {
  std::lock_guard<std::mutex> lock(mu);
  ctx = c;
}

absl::Status GenerateReactor::TransferAndRelay(PrefillResult prefill) {
  const PrefillConfig& config = service_->config();
  KvRegistry* kv = service_->kv();
  // The cache is leased until decode acknowledges it; a stalled transfer is cancelled.
  DecodeCall call_slot;
  HAP_ASSIGN_OR_RETURN(KvRegistry::Handle lease,
                       kv->Acquire(job_.request_id, prefill.kv().bytes(), config.lease_ms,
                                   [&call_slot] { call_slot.Expire(); }));
  absl::Cleanup release = [&] { kv->Release(lease); };
  // On the device both services compute on, the cache is handed over where it is.
  const bool handover =
      config.kv_handover && prefill.device_cache != nullptr && prefill.device_cache->shareable();
  return CallReplicas<absl::Status>(
      service_->decoders(), PrefillMetrics::Get().decode_retries, mutable_rpc_span(),
      "hap.decode.attempts", job_.request_id,
      [&](const std::string& avoid, std::string* address, bool* retryable) {
        absl::Status s = DecodeOnce(prefill, lease, call_slot, avoid, address, retryable, handover);
        if (!IsKvHandoverRefusal(s)) return s;
        // That replica gets the rows, now and from now on.
        service_->NoteHandoverRefused(*address, s);
        return DecodeOnce(prefill, lease, call_slot, avoid, address, retryable, false);
      });
}

absl::Status GenerateReactor::DecodeOnce(PrefillResult& prefill, const KvRegistry::Handle& lease,
                                         DecodeCall& call_slot, const std::string& avoid,
                                         std::string* address, bool* retryable, bool handover) {
  const VisionLanguageModel& model = *service_->model();
  const PrefillConfig& config = service_->config();
  KvRegistry* kv = service_->kv();
  std::unique_ptr<grpc::ClientContext> ctx = grpc::ClientContext::FromCallbackServerContext(*ctx_);
  children_.Add(ctx.get());
  call_slot.Set(ctx.get());
  absl::Cleanup remove = [&] {
    call_slot.Set(nullptr);
    children_.Remove(ctx.get());
  };
  // A lease that expired between attempts has nothing to cancel: this call does not start.
  if (call_slot.lease_expired) {
    return absl::DeadlineExceededError(absl::StrCat(
        "KV transfer to decode did not complete within the ", config.lease_ms, " ms lease"));
  }

  // The prefill's cache: in host memory, or in the device's, read a chunk at a time.
  const KvStore& cache = prefill.kv();
  HAP_ASSIGN_OR_RETURN(KvChunker chunker,
                       KvChunker::Create(&cache, config.max_message_bytes));

  PrefillMetrics& metrics = PrefillMetrics::Get();
  // What decode will reserve for this cache: its rows plus max_new_tokens rows per layer, in the
  // cache's dtype (decode's pool is given the same --kv-dtype). An estimate: decode rounds each
  // layer up to whole blocks (a little more), and a pool of another dtype holds the rows in
  // twice or half the bytes; the choice only compares replicas by it.
  const int64_t kv_need =
      (cache.total_rows() + static_cast<int64_t>(cache.n_layers()) * job_.stop.max_new_tokens) *
      2 * cache.row_bytes();
  const ReplicaSet<hap::v1::Decode>::Lease decode = service_->decoders().Pick(kv_need, avoid);
  *address = decode.address();
  // The handles of the cache's device blocks, or the rows in chunks.
  bool exported = false;
  if (handover && !service_->HandoverRefusedBy(decode.address())) {
    absl::StatusOr<ExportedKv> e = prefill.device_cache->Export();
    if (e.ok()) {  // else the rows
      chunker.HandOver(std::move(*e));
      exported = true;
    }
  }
  telemetry::ClientRpc call(rpc_span().context(), "hap.v1.Decode/Decode", decode.address(),
                            ctx.get());
  // hap.kv_transfer: first KV message sent → decode's acknowledgement of the whole cache.
  telemetry::Span kv_span = telemetry::GlobalTracer().StartSpan("hap.kv_transfer", call.span());
  kv_span.SetAttribute("hap.kv.layers", cache.n_layers())
      .SetAttribute("hap.kv.bytes_sent", exported ? int64_t{0} : cache.bytes())
      .SetAttribute("hap.kv.path", exported ? "device" : "stream");
  const auto t_transfer = Clock::now();
  std::unique_ptr<grpc::ClientReaderWriter<hap::v1::DecodeRequest, hap::v1::DecodeResponse>>
      stream = decode.stub()->Decode(ctx.get());
  hap::v1::DecodeRequest out;
  hap::v1::KvHeader* h = out.mutable_header();
  chunker.FillHeader(h);
  h->set_request_id(job_.request_id);
  h->set_d_model(model.text_config().hidden_size);
  h->set_vocab_size(model.text_config().vocab_size);
  h->set_first_token(prefill.first_token);
  *h->mutable_sampling() = SamplingToProto(job_.sampling);
  h->set_samples_drawn(1);
  h->set_max_new_tokens(job_.stop.max_new_tokens);
  for (const std::string& s : job_.stop.stop_strings) h->add_stop(s);
  bool ok = stream->Write(out);
  while (ok && chunker.Next(out.mutable_chunk())) ok = stream->Write(out);
  if (!chunker.status().ok()) ctx->TryCancel();  // a chunk's rows could not be read
  if (ok && chunker.status().ok()) {
    chunker.FillTrailer(out.mutable_trailer());
    ok = stream->Write(out);
  }
  if (ok) stream->WritesDone();
  out.Clear();

  hap::v1::DecodeResponse in;
  hap::v1::GenerateStats stats;
  bool acked = false, done = false, client_gone = false, first = true;
  std::optional<Clock::time_point> last_token;
  int relayed_tokens = 0;
  while (stream->Read(&in)) {
    if (in.has_ack()) {
      acked = true;
      kv->EndLease(lease);
      stats.set_kv_bytes_received(in.ack().kv_bytes());
      stats.set_kv_chunks(in.ack().n_chunks());
      const double transfer_ms = MsBetween(t_transfer, Clock::now());
      timings_.set_kv_transfer_ms(transfer_ms);
      metrics.kv_transfer_seconds->Observe(transfer_ms / 1e3);
      metrics.kv_transfer_bytes->Inc(static_cast<double>(in.ack().kv_bytes()));
      if (exported) metrics.kv_device_handovers->Inc();
      kv_span.SetAttribute("hap.kv.bytes", in.ack().kv_bytes())
          .SetAttribute("hap.kv.chunks", in.ack().n_chunks())
          .SetAttribute("hap.kv.transfer_ms", transfer_ms)
          .SetAttribute("hap.kv.decode_receive_ms", in.ack().transfer_ms())
          .SetAttribute("hap.kv.gbps",
                        transfer_ms > 0 ? in.ack().kv_bytes() / 1e9 / (transfer_ms / 1e3) : 0.0);
      kv_span.End();
      prefill.cache = KvCache();  // decode has it now
      prefill.device_cache.reset();
      kv->Release(lease);
    } else if (in.has_delta()) {
      const Clock::time_point now = Clock::now();
      if (first) {
        first = false;
        timings_.set_ttft_ms(MsBetween(received_, now));
        metrics.ttft_seconds->Observe(MsBetween(received_, now) / 1e3);
      }
      if (const int n = in.delta().token_ids_size(); n > 0) {
        if (last_token) {
          metrics.inter_token_seconds->Observe(
              std::chrono::duration<double>(now - *last_token).count());
        }
        last_token = now;
        relayed_tokens += n;
        metrics.output_tokens->Inc(n);
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
  call.Finish(st);
  if (!acked) {
    kv_span.SetStatus(telemetry::StatusCode::kError, call_slot.lease_expired
                                                         ? "the KV lease expired"
                                                         : "decode did not acknowledge the cache");
  }
  kv_span.End();
  telemetry::Span& server_span = mutable_rpc_span();
  server_span.SetAttribute("hap.relayed_tokens", relayed_tokens);
  if (!first) server_span.SetAttribute("hap.ttft_ms", timings_.ttft_ms());
  HAP_RETURN_IF_ERROR(chunker.status());
  if (call_slot.lease_expired) {
    return absl::DeadlineExceededError(absl::StrCat(
        "KV transfer to decode did not complete within the ", config.lease_ms, " ms lease"));
  }
  HAP_RETURN_IF_ERROR(CheckCancelled("while decoding"));
  if (client_gone && overflowed()) {
    // Close cancels the call with this status: the client sees it as soon as it reads again
    // (or never), and nothing of the request is held meanwhile.
    metrics.slow_client_cutoffs->Inc();
    std::fprintf(stderr,
                 "hap-prefill: request '%s' cut off after %d tokens: the client stopped reading "
                 "its stream (--max-stream-queue %zu)\n",
                 absl::CHexEscape(job_.request_id).c_str(), relayed_tokens, max_queued());
    return absl::ResourceExhaustedError(
        absl::StrCat("the client stopped reading its stream: ", max_queued(),
                     " messages were waiting (--max-stream-queue)"));
  }
  if (client_gone) return absl::CancelledError("the client went away");
  if (!st.ok()) {
    // Decode had not taken the cache and the client has seen nothing: another replica can.
    *retryable = st.error_code() == grpc::StatusCode::UNAVAILABLE && !acked && first;
    if (exported && !acked && first && IsKvHandoverRefusal(FromGrpc(st))) return FromGrpc(st);
    return PeerError("decode", decode.address(), st, /*client_input=*/false);
  }
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
  if (server_span.recording()) {
    std::string reason = hap::v1::FinishReason_Name(stats.finish_reason());
    if (reason.rfind("FINISH_REASON_", 0) == 0) reason = absl::AsciiStrToLower(reason.substr(14));
    server_span.SetAttribute("gen_ai.usage.output_tokens", n_tok)
        .SetAttribute("gen_ai.response.finish_reasons", std::vector<std::string>{reason})
        .SetAttribute("hap.kv.bytes", stats.kv_bytes_received())
        .SetAttribute("hap.visual_tokens.average", p.average_visual_tokens)
        .SetAttribute("hap.total_ms", timings_.total_ms());
  }
  *stats.mutable_timings() = timings_;
  hap::v1::GenerateResponse last;
  *last.mutable_stats() = std::move(stats);
  Send(std::move(last));
  return absl::OkStatus();
}

}  // namespace hap::svc
