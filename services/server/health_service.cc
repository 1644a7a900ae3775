#include "services/server/health_service.h"

#include <utility>

#include "grpcpp/impl/server_builder_option.h"
#include "services/wire/reaction_order.h"

namespace hap::svc {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch stream. Only one write is in flight at a time; a status that changes meanwhile is
// sent when it completes (intermediate flips collapse into the latest status, as the protocol
// allows). Finish waits for an outstanding write and is issued when it completes. The order gRPC
// keeps between the calls is told to ThreadSanitizer (reaction_order.h).
class HealthService::Watcher final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService* owner, std::string service)
      : owner_(owner), service_(std::move(service)) {}

  // Called with the owner's lock held.
  void Notify(HealthCheckResponse::ServingStatus status) {
    std::lock_guard<std::mutex> lock(mu_);
    latest_ = status;
    MaybeWriteLocked();
  }

  void FinishOnce(grpc::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    RequestFinishLocked(std::move(status));
  }

  void OnWriteDone(bool ok) override {
    order_.After(ReactionOrder::kWrite);
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok) {
        RequestFinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "health watch write failed"));
      } else if (finish_requested_) {  // Shutdown or cancel came while the write was in flight.
        RequestFinishLocked(finish_status_);
      } else {
        MaybeWriteLocked();
      }
    }
    order_.Before(ReactionOrder::kDone);  // OnDone waits for this reaction to return
  }

  void OnCancel() override {
    order_.After(ReactionOrder::kBound);
    FinishOnce(grpc::Status::CANCELLED);
    order_.Before(ReactionOrder::kDone);
  }

  void OnDone() override {
    order_.After(ReactionOrder::kDone);
    owner_->Remove(this);
    delete this;
  }

 private:
  void MaybeWriteLocked() {
    if (writing_ || finish_requested_ || latest_ == sent_) return;
    sent_ = latest_;
    response_.set_status(sent_);
    writing_ = true;
    order_.Before(ReactionOrder::kWrite);
    GrpcCode in_grpc;
    StartWrite(&response_);
  }

  void RequestFinishLocked(grpc::Status status) {
    if (!finish_requested_) {
      finish_requested_ = true;
      finish_status_ = std::move(status);
    }
    if (!writing_ && !finished_) {
      finished_ = true;
      grpc::Status status = finish_status_;
      order_.Before(ReactionOrder::kDone);
      GrpcCode in_grpc;
      Finish(std::move(status));
    }
  }

  HealthService* const owner_;
  const std::string service_;
  std::mutex mu_;
  HealthCheckResponse::ServingStatus latest_ = HealthCheckResponse::UNKNOWN;
  HealthCheckResponse::ServingStatus sent_ = HealthCheckResponse::UNKNOWN;
  HealthCheckResponse response_;
  bool writing_ = false;
  bool finish_requested_ = false;
  bool finished_ = false;
  grpc::Status finish_status_;
  ReactionOrder order_;

  friend class HealthService;
};

HealthService::HealthService(std::vector<std::string> services)
    : services_(services.begin(), services.end()) {}

HealthService::~HealthService() { Shutdown(); }

HealthCheckResponse::ServingStatus HealthService::StatusOf(const std::string& service) const {
  if (!service.empty() && services_.count(service) == 0)
    return HealthCheckResponse::SERVICE_UNKNOWN;
  return serving_ ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

void HealthService::SetServing(bool serving) {
  std::lock_guard<std::mutex> lock(mu_);
  if (serving_ == serving) return;
  serving_ = serving;
  for (Watcher* w : watchers_) w->Notify(StatusOf(w->service_));
}

void HealthService::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shut_down_ = true;
  for (Watcher* w : watchers_) w->FinishOnce(grpc::Status::OK);
}

void HealthService::Remove(Watcher* w) {
  std::lock_guard<std::mutex> lock(mu_);
  watchers_.erase(w);
}

grpc::Status HealthService::Answer(const std::string& service,
                                   HealthCheckResponse* response) const {
  std::lock_guard<std::mutex> lock(mu_);
  const HealthCheckResponse::ServingStatus status = StatusOf(service);
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service '" + service + "'");
  }
  response->set_status(status);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* ctx,
                                               const HealthCheckRequest* request,
                                               HealthCheckResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(Answer(request->service(), response));
  return reactor;
}

grpc::ServerUnaryReactor* HealthCheckOnly::Check(grpc::CallbackServerContext* ctx,
                                                 const HealthCheckRequest* request,
                                                 HealthCheckResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(health_->Answer(request->service(), response));
  return reactor;
}

namespace {

// Drops the builder's plugins: grpc++_reflection registers its plugin for every ServerBuilder
// of the process at static initialisation, and a health-only port must not serve reflection.
class WithoutPlugins final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* /*args*/) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->clear();
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<grpc::Server>> StartHealthCheckServer(const std::string& address,
                                                                     HealthCheckOnly* service,
                                                                     int* port) {
  grpc::ServerBuilder builder;
  builder.SetOption(std::make_unique<WithoutPlugins>());
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
  // A Check request is a service name: nothing bigger comes in.
  builder.SetMaxReceiveMessageSize(4096);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 4);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 30 * 1000);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, 60 * 1000);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *port == 0) {
    return absl::UnavailableError("cannot listen for health checks on " + address);
  }
  return server;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext* /*ctx*/, const HealthCheckRequest* request) {
  auto* w = new Watcher(this, request->service());
  std::lock_guard<std::mutex> lock(mu_);
  watchers_.insert(w);
  if (shut_down_) {
    w->FinishOnce(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down"));
  } else {
    w->Notify(StatusOf(request->service()));
  }
  w->order_.Before(ReactionOrder::kBound);
  return w;
}

}  // namespace hap::svc
