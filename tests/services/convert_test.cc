// PruneFromProto: the prefill service's check of a request's pruning options, here the
// PAQ-softmax temperature (unset = 1; [0.01, 100]; hap and hap-flat only).
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "services/wire/proto_convert.h"

namespace hap::svc {
namespace {

constexpr int kVisual = 576;

hap::v1::Pruning Pruning(const std::string& method, const std::string& retain = "64") {
  hap::v1::Pruning p;
  p.set_method(method);
  if (!retain.empty()) p.set_retain(retain);
  return p;
}

void ExpectInvalid(const hap::v1::Pruning& req, const hap::v1::Pruning& defaults,
                   const std::string& needle) {
  absl::StatusOr<PruneRequest> r = PruneFromProto(req, defaults, kVisual);
  ASSERT_FALSE(r.ok()) << req.ShortDebugString();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
}

TEST(PruneFromProto, PaqTemperatureUnsetIsOne) {
  for (const char* m : {"hap", "hap-flat", "uniform", "fastv", "none"}) {
    absl::StatusOr<PruneRequest> r = PruneFromProto(Pruning(m), hap::v1::Pruning(), kVisual);
    ASSERT_TRUE(r.ok()) << m << ": " << r.status();
    EXPECT_EQ(r->paq_temperature, 1.0) << m;
  }
}

TEST(PruneFromProto, PaqTemperatureForHapMethods) {
  for (const char* m : {"hap", "hap-flat"}) {
    for (double tau : {0.01, 0.05, 1.0, 7.5, 100.0}) {
      hap::v1::Pruning p = Pruning(m);
      p.set_paq_temperature(tau);
      absl::StatusOr<PruneRequest> r = PruneFromProto(p, hap::v1::Pruning(), kVisual);
      ASSERT_TRUE(r.ok()) << m << " " << tau << ": " << r.status();
      EXPECT_EQ(r->paq_temperature, tau);
    }
  }
  // The method may come from the server's default.
  hap::v1::Pruning p = Pruning("", "");
  p.set_paq_temperature(0.05);
  absl::StatusOr<PruneRequest> r = PruneFromProto(p, Pruning("hap"), kVisual);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->method, "hap");
  EXPECT_EQ(r->paq_temperature, 0.05);
  ExpectInvalid(p, Pruning("fastv"), "method 'fastv' does not weight by PAQ-softmax");
  ExpectInvalid(p, Pruning("none", ""), "method 'none'");
}

TEST(PruneFromProto, PaqTemperatureOutOfRange) {
  for (double tau : {0.0, 0.0099, -0.5, 100.01, 1e9, double(NAN), double(INFINITY)}) {
    hap::v1::Pruning p = Pruning("hap");
    p.set_paq_temperature(tau);
    ExpectInvalid(p, hap::v1::Pruning(), "paq_temperature");
    ExpectInvalid(p, hap::v1::Pruning(), "must lie in [0.01, 100]");
  }
}

TEST(PruneFromProto, PaqTemperatureRejectedForOtherMethods) {
  for (const char* m : {"uniform", "uniform-flat", "fastv", "pdrop", "sparsevlm", "visionzip",
                        "random", "dart", "divprune", "cdpruner-llm", "none"}) {
    hap::v1::Pruning p = Pruning(m);
    p.set_paq_temperature(0.5);
    ExpectInvalid(p, hap::v1::Pruning(), "only 'hap' and 'hap-flat'");
    // An explicit 1 is the default, accepted everywhere.
    p.set_paq_temperature(1.0);
    EXPECT_TRUE(PruneFromProto(p, hap::v1::Pruning(), kVisual).ok()) << m;
  }
}

}  // namespace
}  // namespace hap::svc
