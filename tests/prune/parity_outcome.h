// The result of one case of a table-driven parity harness (STYLE.md §3, §4): the worst element
// against atol + rtol·|ref|, NaN/Inf in the output, and writes into the guard zones around it;
// and the tally over all cases that the harness prints as its summary line.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace hap::testref {

struct ParityOutcome {
  double worst_abs = 0;    // max |got − ref|
  double worst_ratio = 0;  // max |got − ref| / (atol + rtol·|ref|); must stay ≤ 1
  bool finite = true;
  bool guards_intact = true;

  // One element of the output against its reference; a NaN/Inf element only clears `finite`.
  void Add(double got, double ref, double atol, double rtol) {
    if (!std::isfinite(got)) {
      finite = false;
      return;
    }
    const double err = std::abs(got - ref);
    worst_abs = std::max(worst_abs, err);
    worst_ratio = std::max(worst_ratio, err / (atol + rtol * std::abs(ref)));
  }
};

// Checks each case's outcome as it comes and keeps the count that passed and the worst case.
struct ParityTally {
  int passed = 0;
  double worst_ratio = 0;
  std::string worst_case;

  void Check(const std::string& name, const ParityOutcome& o) {
    EXPECT_TRUE(o.finite) << name << ": NaN/Inf in the output";
    EXPECT_TRUE(o.guards_intact) << name << ": wrote outside its output";
    EXPECT_LE(o.worst_ratio, 1.0) << name << ": worst |err| " << o.worst_abs;
    if (o.worst_ratio > worst_ratio) {
      worst_ratio = o.worst_ratio;
      worst_case = absl::StrFormat("%s (|err| %.3g)", name, o.worst_abs);
    }
    passed += o.finite && o.guards_intact && o.worst_ratio <= 1.0;
  }
};

}  // namespace hap::testref
