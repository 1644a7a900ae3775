#include "services/prefill/decode_load.h"

#include <algorithm>

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
    if (call_ != nullptr) call_->TryCancel();
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
  for (int i = 0; i < n; ++i) {
    const auto stub = hap::v1::Debug::NewStub(members->replicas[i]->channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      call_ = &ctx;
    }
    const auto asked_at = KvReports::Clock::now();
    hap::v1::ServerState state;
    const grpc::Status st = stub->GetState(&ctx, hap::v1::GetStateRequest(), &state);
    {
      std::lock_guard<std::mutex> lock(mu_);
      call_ = nullptr;
    }
    // No answer, no pool, or not taking requests (loading, draining): unknown.
    if (!st.ok() || !state.serving() || state.kv_pool_blocks_total() <= 0) {
      reports->Unknown(i);
      continue;
    }
    const int64_t free_blocks =
        std::max<int64_t>(0, state.kv_pool_blocks_total() - state.kv_pool_blocks_in_use());
    reports->Report(i, free_blocks * state.kv_pool_block_bytes(), asked_at);
  }
}

}  // namespace hap::svc
