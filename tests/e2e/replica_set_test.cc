// ReplicaSet's choice rules without servers: by reported free KV memory (KvReports) when every
// replica has a fresh report, by the fewest calls in flight otherwise.
#include "services/common/replica_set.h"

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

TEST(ReplicaSetTest, PickUsesTheReportsAndCountsInFlight) {
  auto channel = [](const std::string& a) {
    return grpc::CreateChannel(a, grpc::InsecureChannelCredentials());
  };
  ReplicaSet<hap::v1::Decode> set({"127.0.0.1:1", "127.0.0.1:2"}, channel);
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
    EXPECT_EQ(leases.back().address(), "127.0.0.1:2");
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

}  // namespace
}  // namespace hap::svc
