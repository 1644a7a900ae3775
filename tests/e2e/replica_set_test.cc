// ReplicaSet's choice rules without servers: by reported free KV memory (KvReports) when every
// replica has a fresh report, by the fewest calls in flight otherwise.
#include "services/routing/replica_set.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"
#include "hap/v1/decode.grpc.pb.h"

namespace hap::svc {
namespace {

using Clock = KvReports::Clock;
using std::chrono::milliseconds;

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(KvReportsTest, FreshReportsMostFreeWinsWhateverIsInFlight) {
  KvReports r(3, milliseconds(1000));
  const Clock::time_point t = Clock::now();
  r.Report(0, 100 * kMiB, t);
  r.Report(1, 500 * kMiB, t);
  r.Report(2, 200 * kMiB, t);
  // Replica 1 has the most calls in flight but the most free memory.
  for (int start = 0; start < 3; ++start) {
    EXPECT_EQ(r.Choose({0, 5, 0}, start, 0, t), 1) << start;
  }
}

TEST(KvReportsTest, ClaimsLowerTheEstimateSoClosePicksSpread) {
  KvReports r(2, milliseconds(1000));
  const Clock::time_point t = Clock::now();
  r.Report(0, 1000 * kMiB, t);
  r.Report(1, 990 * kMiB, t);
  std::vector<int> picks;
  for (int k = 0; k < 6; ++k) picks.push_back(r.Choose({0, 0}, 0, 100 * kMiB, t + milliseconds(1)));
  EXPECT_EQ(picks, (std::vector<int>{0, 1, 0, 1, 0, 1}));
  int64_t free0 = 0, free1 = 0;
  ASSERT_TRUE(r.Estimate(0, t + milliseconds(1), &free0));
  ASSERT_TRUE(r.Estimate(1, t + milliseconds(1), &free1));
  EXPECT_EQ(free0, 700 * kMiB);
  EXPECT_EQ(free1, 690 * kMiB);
  // Far apart, the claims do not spread them: the larger keeps winning while it stays larger.
  KvReports far(2, milliseconds(1000));
  far.Report(0, 100 * kMiB, t);
  far.Report(1, 1000 * kMiB, t);
  for (int k = 0; k < 9; ++k) EXPECT_EQ(far.Choose({0, 0}, k % 2, 100 * kMiB, t), 1) << k;
  EXPECT_EQ(far.Choose({0, 0}, 0, 100 * kMiB, t), 0);  // 100 MiB left each: tie, in turn
}

TEST(KvReportsTest, ANewReportDropsTheClaimsMadeBeforeItWasAskedFor) {
  KvReports r(1, milliseconds(1000));
  const Clock::time_point t = Clock::now();
  r.Report(0, 1000 * kMiB, t);
  r.Choose({0}, 0, 100 * kMiB, t + milliseconds(1));
  r.Choose({0}, 0, 100 * kMiB, t + milliseconds(3));
  int64_t free = 0;
  ASSERT_TRUE(r.Estimate(0, t + milliseconds(3), &free));
  EXPECT_EQ(free, 800 * kMiB);
  // Asked for between the two picks: the first is in it, the second is not.
  r.Report(0, 900 * kMiB, t + milliseconds(2));
  ASSERT_TRUE(r.Estimate(0, t + milliseconds(4), &free));
  EXPECT_EQ(free, 800 * kMiB);
  // An older poll answering late changes nothing.
  r.Report(0, 5 * kMiB, t + milliseconds(1));
  ASSERT_TRUE(r.Estimate(0, t + milliseconds(4), &free));
  EXPECT_EQ(free, 800 * kMiB);
  r.Report(0, 1000 * kMiB, t + milliseconds(5));
  ASSERT_TRUE(r.Estimate(0, t + milliseconds(6), &free));
  EXPECT_EQ(free, 1000 * kMiB);
}

TEST(KvReportsTest, StaleOrUnknownFallsBackToFewestInFlight) {
  KvReports r(3, milliseconds(100));
  const Clock::time_point t = Clock::now();
  // No reports yet.
  EXPECT_EQ(r.Choose({2, 1, 3}, 0, kMiB, t), 1);
  r.Report(0, 900 * kMiB, t);
  r.Report(1, 100 * kMiB, t);
  // Replica 2 unknown: all by in flight, though 0 reports the most free.
  EXPECT_EQ(r.Choose({2, 1, 3}, 0, kMiB, t), 1);
  r.Report(2, 100 * kMiB, t);
  EXPECT_EQ(r.Choose({2, 1, 3}, 0, kMiB, t), 0);  // all fresh: most free
  // 100 ms later every report is stale.
  EXPECT_EQ(r.Choose({2, 1, 3}, 0, kMiB, t + milliseconds(100)), 1);
  int64_t free = 0;
  EXPECT_FALSE(r.Estimate(0, t + milliseconds(100), &free));
  // A fresh report again, then the replica stops answering.
  const Clock::time_point t2 = t + milliseconds(200);
  for (int i = 0; i < 3; ++i) r.Report(i, (i + 1) * 100 * kMiB, t2);
  EXPECT_EQ(r.Choose({0, 0, 5}, 0, kMiB, t2), 2);
  r.Unknown(2);
  EXPECT_EQ(r.Choose({0, 0, 5}, 0, kMiB, t2), 0);
  EXPECT_FALSE(r.Estimate(2, t2, &free));
  // Ties in flight go in turn from `start`.
  EXPECT_EQ(r.Choose({0, 0, 5}, 1, kMiB, t2), 1);
  EXPECT_EQ(r.Choose({4, 4, 4}, 2, kMiB, t2), 2);
}

TEST(KvReportsTest, TiesInFreeMemoryGoByFewestInFlight) {
  KvReports r(3, milliseconds(1000));
  const Clock::time_point t = Clock::now();
  r.Report(0, 100 * kMiB, t);
  r.Report(1, 300 * kMiB, t);
  r.Report(2, 300 * kMiB, t);
  EXPECT_EQ(r.Choose({0, 2, 1}, 0, 0, t), 2);
  EXPECT_EQ(r.Choose({0, 1, 1}, 0, 0, t), 1);  // tied in flight too: in turn from 0
  EXPECT_EQ(r.Choose({0, 1, 1}, 2, 0, t), 2);
}

std::shared_ptr<grpc::Channel> Channel(const std::string& address, const std::string&) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

// A gRPC server on a loopback port whose methods are all unimplemented: enough for a channel
// to connect.
class LiveServer {
 public:
  LiveServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~LiveServer() { server_->Shutdown(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int port_ = 0;
  hap::v1::Decode::CallbackService service_;
  std::unique_ptr<grpc::Server> server_;
};

// Waits until every member's channel is connected (Pick prefers connected replicas).
template <typename Set>
void WaitConnected(const Set& set) {
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(10);
  for (const auto& r : set.members()->replicas) {
    for (auto s = r->channel->GetState(true); s != GRPC_CHANNEL_READY;
         s = r->channel->GetState(true)) {
      ASSERT_TRUE(r->channel->WaitForStateChange(s, deadline)) << r->address << " did not connect";
    }
  }
}

TEST(ReplicaSetTest, PickUsesTheReportsAndCountsInFlight) {
  LiveServer a, b;
  ReplicaSet<hap::v1::Decode> set({a.address(), b.address()}, Channel);
  WaitConnected(set);
  {  // Without reports: in turn, fewest in flight.
    auto a = set.Pick(kMiB);
    auto b = set.Pick(kMiB);
    EXPECT_NE(a.index(), b.index());
  }
  set.EnableKvReports(milliseconds(60000));
  const Clock::time_point t = Clock::now();
  set.kv_reports()->Report(0, 10 * kMiB, t);
  set.kv_reports()->Report(1, 1000 * kMiB, t);
  std::vector<ReplicaSet<hap::v1::Decode>::Lease> leases;
  for (int k = 0; k < 5; ++k) {
    leases.push_back(set.Pick(kMiB));
    EXPECT_EQ(leases.back().index(), 1);
    EXPECT_EQ(leases.back().address(), b.address());
  }
  // Many threads at once: every claim lands exactly once.
  std::vector<std::thread> threads;
  for (int th = 0; th < 8; ++th) {
    threads.emplace_back([&set] {
      for (int k = 0; k < 200; ++k) set.Pick(kMiB / 4);
    });
  }
  for (auto& th : threads) th.join();
  int64_t free0 = 0, free1 = 0;
  ASSERT_TRUE(set.kv_reports()->Estimate(0, Clock::now(), &free0));
  ASSERT_TRUE(set.kv_reports()->Estimate(1, Clock::now(), &free1));
  EXPECT_EQ((10 * kMiB - free0) + (1000 * kMiB - free1), 5 * kMiB + 8 * 200 * (kMiB / 4));
  EXPECT_EQ(free0, 10 * kMiB);  // the other never came close
}

TEST(ResolvePeerAddressTest, NamesResolveEverythingElseStandsForItself) {
  for (const std::string a : {"127.0.0.1:50051", "[::1]:50051", "dns:///localhost:50051",
                              "unix:/run/hap.sock", "ipv4:127.0.0.1:5,127.0.0.2:5", "nocolon"}) {
    auto r = ResolvePeerAddress(a);
    ASSERT_TRUE(r.ok()) << a << ": " << r.status();
    EXPECT_EQ(*r, std::vector<std::string>{a});
  }
  auto local = ResolvePeerAddress("localhost:50051");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_NE(std::find(local->begin(), local->end(), "127.0.0.1:50051"), local->end());
  EXPECT_TRUE(std::is_sorted(local->begin(), local->end()));
  // RFC 2606 reserves .invalid: it never resolves.
  EXPECT_FALSE(ResolvePeerAddress("hap-decode.invalid:50052").ok());
}

TEST(ExpandAddressesTest, ResolvedKeptOrItself) {
  const AddressResolver resolve =
      [](const std::string& a) -> absl::StatusOr<std::vector<std::string>> {
    if (a == "decode:1") return std::vector<std::string>{"10.0.0.1:1", "10.0.0.2:1"};
    if (a == "same:1") return std::vector<std::string>{"10.0.0.2:1"};
    if (a == "10.0.0.9:1") return std::vector<std::string>{a};
    return absl::UnavailableError("no DNS");
  };
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(
      ExpandAddresses({"decode:1", "10.0.0.9:1"}, resolve, {}),
      (Pairs{
          {"decode:1", "10.0.0.1:1"}, {"decode:1", "10.0.0.2:1"}, {"10.0.0.9:1", "10.0.0.9:1"}}));
  // A name that fails to resolve keeps what it had, or stands for itself.
  EXPECT_EQ(ExpandAddresses({"gone:1", "new:1"}, resolve, {{"gone:1", "10.0.0.7:1"}}),
            (Pairs{{"gone:1", "10.0.0.7:1"}, {"new:1", "new:1"}}));
  // Two names for one pod: one replica each (they were configured apart).
  EXPECT_EQ(
      ExpandAddresses({"decode:1", "same:1", "decode:1"}, resolve, {}),
      (Pairs{{"decode:1", "10.0.0.1:1"}, {"decode:1", "10.0.0.2:1"}, {"same:1", "10.0.0.2:1"}}));
}

TEST(ReplicaSetTest, RefreshMakesEachResolvedAddressAReplicaAndKeepsWhatStays) {
  LiveServer pod11, pod12, pod13;
  const std::string p11 = pod11.address(), p12 = pod12.address(), p13 = pod13.address();
  std::vector<std::string> pods = {p11, p12};
  std::vector<std::pair<std::string, std::string>> dialled;  // (address, authority)
  auto channel = [&](const std::string& address, const std::string& authority) {
    dialled.emplace_back(address, authority);
    return Channel(address, authority);
  };
  const AddressResolver resolve =
      [&](const std::string&) -> absl::StatusOr<std::vector<std::string>> { return pods; };
  ReplicaSet<hap::v1::Decode> set({"decode:1"}, channel);
  ASSERT_EQ(set.size(), 1);
  EXPECT_EQ(set.address(0), "decode:1");  // before the first refresh: the name, to gRPC
  set.EnableKvReports(milliseconds(60000));
  EXPECT_TRUE(set.Refresh(resolve));
  ASSERT_EQ(set.size(), 2);
  EXPECT_EQ(set.address(0), p11);
  EXPECT_EQ(set.address(1), p12);
  EXPECT_EQ(dialled.back(), (std::pair<std::string, std::string>{p12, "decode:1"}));
  EXPECT_FALSE(set.Refresh(resolve));  // nothing changed: nothing replaced
  EXPECT_EQ(dialled.size(), 3u);
  WaitConnected(set);

  const Clock::time_point t = Clock::now();
  set.kv_reports()->Report(0, 10 * kMiB, t);
  set.kv_reports()->Report(1, 500 * kMiB, t);
  auto on_12 = std::make_unique<ReplicaSet<hap::v1::Decode>::Lease>(set.Pick(kMiB));
  EXPECT_EQ(on_12->address(), p12);
  auto also_12 = set.Pick(kMiB);
  EXPECT_EQ(set.Pick(400 * kMiB).address(), p12);  // 498 MiB left there, still the most

  // Pod 11 goes, pod 13 comes: 12 keeps its channel, its calls in flight and its report.
  pods = {p12, p13};
  EXPECT_TRUE(set.Refresh(resolve));
  ASSERT_EQ(set.size(), 2);
  EXPECT_EQ(set.address(0), p12);
  EXPECT_EQ(set.address(1), p13);
  EXPECT_EQ(dialled.size(), 4u);  // only 13 is new
  WaitConnected(set);
  auto members = set.members();
  EXPECT_EQ(members->replicas[0]->in_flight.load(), 2);  // on_12 and also_12
  int64_t free = 0;
  ASSERT_TRUE(set.kv_reports()->Estimate(0, Clock::now(), &free));
  EXPECT_EQ(free, 500 * kMiB - 402 * kMiB);
  EXPECT_FALSE(set.kv_reports()->Estimate(1, Clock::now(), &free));  // 13: not reported yet
  // 13 unknown: by fewest in flight, so 13 (0) before 12 (2).
  EXPECT_EQ(set.Pick(kMiB).address(), p13);
  on_12.reset();  // a lease taken before the refresh is released on its replica
  EXPECT_EQ(members->replicas[0]->in_flight.load(), 1);
}

// Picks, KV reports and refreshes from several threads at once (ThreadSanitizer runs this):
// every lease lands on a member of the set it was picked from, and every call in flight is
// counted back to zero.
TEST(ReplicaSetTest, PicksDuringRefreshes) {
  LiveServer a, b, c;
  const std::vector<std::vector<std::string>> lists = {{a.address(), b.address()},
                                                       {b.address(), c.address()},
                                                       {a.address(), b.address(), c.address()}};
  std::atomic<int> which{0};
  const AddressResolver resolve =
      [&](const std::string&) -> absl::StatusOr<std::vector<std::string>> {
    return lists[which.load() % lists.size()];
  };
  ReplicaSet<hap::v1::Decode> set({"decode:1"}, Channel);
  set.EnableKvReports(milliseconds(60000));
  set.Refresh(resolve);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        auto lease = set.Pick(kMiB);
        const std::string address = lease.address();
        EXPECT_TRUE(address == a.address() || address == b.address() || address == c.address())
            << address;
      }
    });
  }
  threads.emplace_back([&] {  // the poller's part
    while (!stop.load()) {
      const auto members = set.members();
      for (size_t i = 0; i < members->replicas.size(); ++i) {
        members->kv_reports->Report(static_cast<int>(i), 100 * kMiB, Clock::now());
      }
    }
  });
  for (int k = 0; k < 30; ++k) {
    which.fetch_add(1);
    set.Refresh(resolve);
    std::this_thread::sleep_for(milliseconds(2));
  }
  stop.store(true);
  for (auto& th : threads) th.join();
  for (const auto& r : set.members()->replicas) EXPECT_EQ(r->in_flight.load(), 0) << r->address;
}

TEST(ReplicaSetTest, PickPassesOverAReplicaThatCannotConnect) {
  // Nothing listens on port 1: that channel fails to connect at once.
  LiveServer live;
  ReplicaSet<hap::v1::Decode> set({"127.0.0.1:1", live.address()}, Channel);
  auto failing = set.members()->replicas[0]->channel;
  failing->GetState(true);
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(10);
  for (grpc_connectivity_state s = failing->GetState(false); s != GRPC_CHANNEL_TRANSIENT_FAILURE;
       s = failing->GetState(false)) {
    ASSERT_TRUE(failing->WaitForStateChange(s, deadline)) << "port 1 did not refuse";
  }
  std::vector<ReplicaSet<hap::v1::Decode>::Lease> leases;
  for (int k = 0; k < 4; ++k) {
    leases.push_back(set.Pick());
    EXPECT_EQ(leases.back().address(), live.address()) << k;
  }
}

}  // namespace
}  // namespace hap::svc
