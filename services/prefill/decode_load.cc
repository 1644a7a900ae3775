#include "services/prefill/decode_load.h"

#include <algorithm>
#include <thread>
#include <utility>

namespace hap::svc {

DecodeLoadPoller::DecodeLoadPoller(ReplicaSet<hap::v1::Decode>* decoders,
                                   std::chrono::milliseconds interval)
    : decoders_(decoders),
      // Short: a replica that cannot answer this quickly is not one to count on.
      deadline_(
          std::clamp(interval, std::chrono::milliseconds(100), std::chrono::milliseconds(1000))) {
  // A report counts for four intervals: one late or lost poll does not drop to the fallback.
  decoders->EnableKvReports(4 * interval);
  thread_ = std::make_unique<PeriodicTask>([this] { PollOnce(); }, interval);
}

DecodeLoadPoller::~DecodeLoadPoller() { Stop(); }

void DecodeLoadPoller::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (grpc::ClientContext* call : calls_) call->TryCancel();
  }
  thread_->Stop();
}

void DecodeLoadPoller::PollOnce() {
  // The members now: reports go to their KvReports even if a refresh replaces them meanwhile
  // (the next round reports to the new ones).
  const auto members = decoders_->members();
  KvReports* reports = members->kv_reports.get();
  const int n = static_cast<int>(members->replicas.size());
  if (n < 2) return;  // nothing to choose between
  struct Poll {
    std::unique_ptr<hap::v1::Debug::Stub> stub;
    grpc::ClientContext ctx;
    hap::v1::ServerState state;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Poll>> polls;
  const hap::v1::GetStateRequest request;
  const auto deadline = std::chrono::system_clock::now() + deadline_;
  const auto asked_at = KvReports::Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    for (int i = 0; i < n; ++i) {
      auto poll = std::make_unique<Poll>();
      poll->stub = hap::v1::Debug::NewStub(members->replicas[i]->channel);
      poll->ctx.set_deadline(deadline);
      calls_.push_back(&poll->ctx);
      polls.push_back(std::move(poll));
    }
  }
  // One blocking call per replica, each on a thread of its own, all at once: every call ends by
  // its deadline (or Stop's cancel), so the round does too. (Blocking calls rather than gRPC's
  // callback API: joining the threads orders their results before the reads below, which
  // ThreadSanitizer can see; Debian's gRPC is not instrumented.)
  std::vector<std::thread> threads;
  threads.reserve(polls.size());
  for (const auto& poll : polls) {
    threads.emplace_back([p = poll.get(), &request] {
      p->status = p->stub->GetState(&p->ctx, request, &p->state);
    });
  }
  for (std::thread& t : threads) t.join();
  {
    // This round's contexts leave the list before they are destroyed (Stop may be cancelling).
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& poll : polls) {
      calls_.erase(std::find(calls_.begin(), calls_.end(), &poll->ctx));
    }
  }
  for (int i = 0; i < n; ++i) {
    const Poll& poll = *polls[i];
    // No answer, no pool, or not taking requests (loading, draining): unknown.
    if (!poll.status.ok() || !poll.state.serving() || poll.state.kv_pool_blocks_total() <= 0) {
      reports->Unknown(i);
      continue;
    }
    const int64_t free_blocks = std::max<int64_t>(
        0, poll.state.kv_pool_blocks_total() - poll.state.kv_pool_blocks_in_use());
    reports->Report(i, free_blocks * poll.state.kv_pool_block_bytes(), asked_at);
  }
}

}  // namespace hap::svc
