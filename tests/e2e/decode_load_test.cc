// DecodeLoadPoller against in-process Debug servers: a round asks every decode replica at once,
// so replicas that accept the call and never answer cost the round one deadline in all, and the
// replicas that answer are reported (free blocks × block bytes) while the silent ones are unknown.
#include "services/prefill/decode_load.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "hap/v1/debug.grpc.pb.h"

namespace hap::svc {
namespace {

using std::chrono::milliseconds;

// Answers GetState with a pool of `total` blocks, `in_use` of them taken, after `delay` (or when
// the caller gives up, whichever comes first).
class FakeDebug final : public hap::v1::Debug::Service {
 public:
  FakeDebug(int64_t total, int64_t in_use, milliseconds delay)
      : total_(total), in_use_(in_use), delay_(delay) {}

  grpc::Status GetState(grpc::ServerContext* ctx, const hap::v1::GetStateRequest*,
                        hap::v1::ServerState* out) override {
    const auto until = std::chrono::steady_clock::now() + delay_;
    while (std::chrono::steady_clock::now() < until && !ctx->IsCancelled()) {
      std::this_thread::sleep_for(milliseconds(5));
    }
    out->set_serving(true);
    out->set_kv_pool_blocks_total(total_);
    out->set_kv_pool_blocks_in_use(in_use_);
    out->set_kv_pool_block_bytes(kBlockBytes);
    return grpc::Status::OK;
  }

  static constexpr int64_t kBlockBytes = 4096;

 private:
  const int64_t total_, in_use_;
  const milliseconds delay_;
};

struct FakeReplica {
  std::unique_ptr<FakeDebug> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

FakeReplica Start(int64_t total, int64_t in_use, milliseconds delay) {
  FakeReplica r;
  r.service = std::make_unique<FakeDebug>(total, in_use, delay);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(r.service.get());
  r.server = builder.BuildAndStart();
  r.address = "127.0.0.1:" + std::to_string(port);
  return r;
}

TEST(DecodeLoadPollerTest, SilentReplicasCostARoundOneDeadlineAndAreUnknown) {
  // Replica 0 answers at once; 1-4 answer only after 20 s, long past the 1 s deadline (the
  // poller's longest: its interval, 1 s, clamped to [100 ms, 1 s]), which gives the fast one's
  // answer room on a loaded machine.
  std::vector<FakeReplica> replicas;
  replicas.push_back(Start(/*total=*/100, /*in_use=*/30, milliseconds(0)));
  for (int i = 0; i < 4; ++i) replicas.push_back(Start(100, 0, milliseconds(20000)));
  std::vector<std::string> addresses;
  for (const FakeReplica& r : replicas) {
    ASSERT_NE(r.server, nullptr);
    addresses.push_back(r.address);
  }
  ReplicaSet<hap::v1::Decode> set(addresses, [](const std::string& address, const std::string&) {
    return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  });
  // A long interval: the poller's own thread makes its first round and then waits; the round
  // timed below is this test's own.
  DecodeLoadPoller poller(&set, milliseconds(1000));

  const auto t0 = std::chrono::steady_clock::now();
  poller.PollOnce();
  const auto round_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t0).count();
  // Asked one after another, the four silent replicas would take at least 4000 ms.
  EXPECT_LT(round_ms, 3000) << "a round waited for the silent replicas one after another";

  const auto members = set.members();
  int64_t free_bytes = 0;
  ASSERT_TRUE(members->kv_reports->Estimate(0, KvReports::Clock::now(), &free_bytes));
  EXPECT_EQ(free_bytes, 70 * FakeDebug::kBlockBytes);
  for (int i = 1; i < 5; ++i) {
    EXPECT_FALSE(members->kv_reports->Estimate(i, KvReports::Clock::now(), &free_bytes)) << i;
  }

  // Stop cancels a round in progress (its calls end at once, not at their deadline).
  std::thread round([&] { poller.PollOnce(); });
  std::this_thread::sleep_for(milliseconds(20));
  const auto t1 = std::chrono::steady_clock::now();
  poller.Stop();
  round.join();
  EXPECT_LT(std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t1).count(),
            900);
  for (FakeReplica& r : replicas) r.server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace hap::svc
