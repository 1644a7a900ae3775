#include "services/prefill/prefill_service.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/compute_gate.h"
#include "base/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "runtime/model/pipeline.h"
#include "services/prefill/generate_reactor.h"
#include "services/wire/proto_convert.h"

namespace hap::svc {

std::shared_ptr<grpc::Channel> PeerChannel(const std::string& address, const std::string& authority,
                                           const PrefillConfig& config) {
  const int max_message_bytes = config.max_message_bytes;
  grpc::ChannelArguments args;
  // No GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC also takes it as the least time one connection
  // attempt gets, and 100 ms is too short for a handshake on a loaded machine (a burst of
  // clients failed with "tcp handshaker shutdown"). The attempt keeps gRPC's 20 s.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Chunks stay under max_message_bytes; a final DecodeDone carries every token id and the text.
  args.SetMaxReceiveMessageSize(std::max(max_message_bytes, 64 << 20));
  // Requests carry the image to the encoder: allow what the front door accepted.
  args.SetMaxSendMessageSize(-1);
  if (!config.peer_server_name.empty()) {
    args.SetSslTargetNameOverride(config.peer_server_name);
  } else if (authority != address) {
    // One of a name's resolved addresses: TLS checks the certificate against the name.
    args.SetSslTargetNameOverride(authority.substr(0, authority.rfind(':')));
  }
  if (authority != address) args.SetString(GRPC_ARG_DEFAULT_AUTHORITY, authority);
  // Every address a name resolves to (the pods behind a headless Service) takes calls in turn.
  args.SetLoadBalancingPolicyName("round_robin");
  return grpc::CreateCustomChannel(
      address,
      config.peer_credentials ? config.peer_credentials : grpc::InsecureChannelCredentials(), args);
}

namespace {

// Resolves a set's configured addresses again; says on stderr when its replicas changed.
template <typename Service>
void RefreshAndLog(ReplicaSet<Service>& set, const char* what) {
  if (!set.Refresh(ResolvePeerAddress)) return;
  std::string list;
  for (const auto& r : set.members()->replicas) {
    absl::StrAppend(&list, list.empty() ? "" : ", ", r->address);
  }
  std::fprintf(stderr, "hap-prefill: %s replicas: %s\n", what, list.c_str());
}

}  // namespace

bool PrefillService::HandoverRefusedBy(const std::string& address) const {
  std::lock_guard<std::mutex> lock(refused_mu_);
  return handover_refused_.count(address) > 0;
}

void PrefillService::NoteHandoverRefused(const std::string& address, const absl::Status& why) {
  std::lock_guard<std::mutex> lock(refused_mu_);
  if (!handover_refused_.insert(address).second) return;
  std::fprintf(stderr,
               "hap-prefill: decode at %s takes KV caches as rows, not on the device (%s)\n",
               address.c_str(), std::string(why.message()).c_str());
}

PrefillService::PrefillService(ServerState* state, WorkerPool* pool, KvRegistry* kv,
                               const PrefillConfig& config)
    : state_(state), pool_(pool), kv_(kv), config_(config) {
  auto channel = [this](const std::string& address, const std::string& authority) {
    return PeerChannel(address, authority, config_);
  };
  encoders_ = std::make_unique<ReplicaSet<hap::v1::Encoder>>(config.encoder_addresses, channel);
  decoders_ = std::make_unique<ReplicaSet<hap::v1::Decode>>(config.decode_addresses, channel);
  // With one address that stays one replica there is nothing to choose between: no polling.
  if (config.decode_poll_ms > 0 && (decoders_->size() > 1 || config.peer_refresh_ms > 0)) {
    decode_load_ = std::make_unique<DecodeLoadPoller>(
        decoders_.get(), std::chrono::milliseconds(config.decode_poll_ms));
  }
  if (config.peer_refresh_ms > 0) {
    peer_refresh_ = std::make_unique<PeriodicTask>(
        [this] {
          RefreshAndLog(*encoders_, "hap-encoder");
          RefreshAndLog(*decoders_, "hap-decode");
        },
        std::chrono::milliseconds(config.peer_refresh_ms));
  }
  if (config.prefill_batch_tokens > 0) {
    // Passes take turns at the process's compute gate as lone prefills do; one over the budget
    // is sliced by layers. A request cancelled in a pass leaves it between layers
    // (PrefillJob::cancelled); the pass stops when every request in it is cancelled.
    batcher_ = std::make_unique<PrefillBatcher>(config.prefill_batch_tokens, /*layers=*/0,
                                                &ProcessComputeGate(),
                                                [this](const std::vector<PrefillJob>& jobs) {
                                                  PrefillMetrics::Get().prefill_passes->Inc();
                                                  return model()->RunPrefillBatch(jobs);
                                                });
  }
  PrefillMetrics::Get();  // on /metrics from the start
  SampledRowsMetrics::Get();
}

void PrefillService::SetModel(const VisionLanguageModel* model) {
  model_ = model;
  if (batcher_ != nullptr && model != nullptr) {
    batcher_->set_layers(model->text_config().num_hidden_layers);
  }
}

absl::StatusOr<GenerateJob> PrefillService::Check(const hap::v1::GenerateRequest& request) {
  HAP_RETURN_IF_ERROR(state_->CheckAccepting());
  const VisionLanguageModel* model = model_.load();
  GenerateJob job;
  job.request_id =
      request.request_id().empty() ? state_->NewRequestId("req") : request.request_id();
  if (job.request_id.size() > 256) {
    return absl::InvalidArgumentError("request_id is longer than 256 bytes");
  }
  if (request.image().empty()) {
    return absl::InvalidArgumentError("image is required (JPEG or PNG bytes)");
  }
  if (static_cast<int64_t>(request.image().size()) > config_.max_image_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("image is ", request.image().size(), " bytes; the limit is ",
                     config_.max_image_bytes, " (--max-image-bytes)"));
  }
  if (!request.prompt().empty() && !request.raw_prompt().empty()) {
    return absl::InvalidArgumentError("give prompt or raw_prompt, not both");
  }
  if (request.prompt().empty() && request.raw_prompt().empty()) {
    return absl::InvalidArgumentError("prompt is empty");
  }
  job.prompt = request.raw_prompt().empty() ? PromptText(request.prompt())
                                            : PromptText::Rendered(request.raw_prompt());
  HAP_ASSIGN_OR_RETURN(job.sampling, SamplingFromProto(request.sampling()));
  HAP_ASSIGN_OR_RETURN(job.stop, StopFromProto(request.max_new_tokens(), request.stop()));
  // The image's visual tokens (read from its header where they follow its size): what a
  // percentage budget is of and what the prompt's length counts.
  HAP_ASSIGN_OR_RETURN(job.visual_tokens, model->VisualTokensOf(request.image()));
  HAP_ASSIGN_OR_RETURN(
      job.prune, PruneFromProto(request.pruning(), config_.default_pruning, job.visual_tokens));
  // Prompt length (--max-prompt-tokens), method and budget against this model and image.
  HAP_RETURN_IF_ERROR(model->ValidateRequest(job.prompt, job.prune, job.visual_tokens));
  return job;
}

grpc::ServerWriteReactor<hap::v1::GenerateResponse>* PrefillService::Generate(
    grpc::CallbackServerContext* ctx, const hap::v1::GenerateRequest* request) {
  return GenerateReactor::HandToGrpc(new GenerateReactor(this, ctx, request));
}

}  // namespace hap::svc
