// The write side of a server-streaming or bidi reactor, usable from worker threads: Send()
// queues a message and the reactor writes one at a time; Close() finishes the call once the
// queue is written. The first Close() wins. Whoever closes must not touch the reactor after
// Close() returns: gRPC may run OnDone (which deletes it) right away. The call's telemetry (the
// SERVER span, the request counter and latency) is finished at the first Close(), before the
// status is sent, so a client that saw the status also sees it counted. The order gRPC keeps
// between the calls is told to ThreadSanitizer (reaction_order.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <mutex>

#include "grpc/grpc.h"
#include "grpcpp/grpcpp.h"
#include "services/wire/reaction_order.h"
#include "telemetry/rpc.h"

namespace hap::svc {

// Base is grpc::ServerWriteReactor<Response> or grpc::ServerBidiReactor<Request, Response>.
template <class Base, class Response>
class OutboxReactor : public Base {
 public:
  // Messages waiting to be written at most, unless the derived reactor sets another bound: a
  // client that stops reading its stream is cut off there (Send returns false, overflowed() is
  // true) instead of growing the queue without end.
  static constexpr size_t kDefaultMaxQueued = 4096;

  // Thread-safe. False once the call is closing, the client is gone, or it stopped reading and
  // max_queued() messages wait (the message is dropped).
  bool Send(Response message) {
    Action action;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_ || broken_) return false;
      if (queue_.size() >= max_queued_) {
        broken_ = true;
        overflowed_ = true;
        queue_.clear();
        return false;
      }
      queue_.push_back(std::move(message));
      action = NextLocked();
    }
    if (action != Action::kNone) Do(action);  // else a write in flight may finish the call
    return true;
  }

  // Thread-safe; only the first call counts. After an overflow the write in flight waits on a
  // client that does not read, and the status would wait behind it (holding the call until the
  // client reads, cancels or its deadline passes): the call is cancelled with `status` instead,
  // which gRPC sends as trailers (not flow-controlled) and which ends the stalled write at once.
  void Close(const grpc::Status& given) {
    if (close_started_.exchange(true)) return;
    bool overflowed, cut_off;
    {
      std::lock_guard<std::mutex> lock(mu_);
      overflowed = overflowed_;
      cut_off = overflowed_ && writing_;
    }
    // Whatever the handler says, a call whose messages were dropped did not succeed.
    const grpc::Status status = overflowed && given.ok()
                                    ? grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                                   "the client stopped reading its stream")
                                    : given;
    // Before closing_ is set, nothing can finish the call: the telemetry is complete before the
    // status can reach the client. Once closing_ is set and the lock released, a write completing
    // on a gRPC thread may finish the call and delete this reactor, so nothing of `this` is
    // touched after the lock unless this call owns the next action.
    rpc_.Finish(status);
    // Outside the lock: the cancel may run OnWriteDone(false) on this thread before it returns.
    if (cut_off && call_ != nullptr) {
      GrpcCode in_grpc;
      grpc_call_cancel_with_status(call_, static_cast<grpc_status_code>(status.error_code()),
                                   status.error_message().c_str(), nullptr);
    }
    Action action;
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
      final_status_ = status;
      action = NextLocked();
    }
    if (action != Action::kNone) Do(action);
  }

  bool cancelled() const { return cancelled_.load(); }
  size_t max_queued() const { return max_queued_; }
  // Send gave up because the client did not read max_queued() messages.
  bool overflowed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return overflowed_;
  }

  // The handler's return value: `return EncodeReactor::HandToGrpc(new EncodeReactor(...));`.
  template <class Reactor>
  static Reactor* HandToGrpc(Reactor* reactor) {
    reactor->order_.Before(ReactionOrder::kBound);
    return reactor;
  }

 protected:
  OutboxReactor() = default;
  explicit OutboxReactor(size_t max_queued) : max_queued_(max_queued > 0 ? max_queued : 1) {}
  virtual ~OutboxReactor() = default;

  // Runs on a gRPC thread when the client cancels or the deadline passes.
  virtual void OnCancelled() {}

  // Starts the call's telemetry; derived constructors call it first ("hap.v1.Encoder/Encode").
  // The call is kept to cut off a client that stopped reading (Close).
  void StartRpc(grpc::ServerContextBase& ctx, const char* method) {
    rpc_.Start(ctx, method);
    call_ = ctx.c_call();
  }
  // The SERVER span: parent of the service's own spans. Its context stays valid after Close.
  const telemetry::Span& rpc_span() { return rpc_.span(); }
  telemetry::Span& mutable_rpc_span() { return rpc_.span(); }
  // For a derived reactor's own reactions (OnReadDone) and StartRead calls.
  ReactionOrder& order() { return order_; }

  void OnWriteDone(bool ok) override {
    order_.After(ReactionOrder::kWrite);
    Action action;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok) {
        broken_ = true;
        queue_.clear();
      }
      action = NextLocked();
    }
    if (action != Action::kNone) Do(action);
    order_.Before(ReactionOrder::kDone);  // OnDone waits for this reaction to return
  }

  void OnCancel() override {
    order_.After(ReactionOrder::kBound);
    cancelled_ = true;
    OnCancelled();
    order_.Before(ReactionOrder::kDone);
  }

  void OnDone() override {
    order_.After(ReactionOrder::kDone);
    delete this;
  }

 private:
  enum class Action { kNone, kWrite, kFinish };

  Action NextLocked() {
    if (writing_ || finished_) return Action::kNone;
    if (!queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      return Action::kWrite;
    }
    if (closing_) {
      finished_ = true;
      return Action::kFinish;
    }
    return Action::kNone;
  }

  void Do(Action action) {
    if (action == Action::kWrite) {
      order_.Before(ReactionOrder::kWrite);
      GrpcCode in_grpc;
      this->StartWrite(&current_);
    } else if (action == Action::kFinish) {
      grpc::Status status = final_status_;
      order_.Before(ReactionOrder::kDone);
      GrpcCode in_grpc;
      this->Finish(std::move(status));  // the last use of `this`
    }
  }

  const size_t max_queued_ = kDefaultMaxQueued;
  grpc_call* call_ = nullptr;  // null without StartRpc (the unit tests' fake reactors)
  mutable std::mutex mu_;
  std::deque<Response> queue_;
  Response current_;  // the message being written
  bool writing_ = false;
  bool closing_ = false;
  bool finished_ = false;
  bool broken_ = false;
  bool overflowed_ = false;
  std::atomic<bool> close_started_{false};  // the first Close() won
  grpc::Status final_status_;
  std::atomic<bool> cancelled_{false};
  telemetry::ServerRpc rpc_;
  ReactionOrder order_;
};

}  // namespace hap::svc
