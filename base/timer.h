// Wall-clock helpers on the monotonic clock.
#pragma once

#include <chrono>

namespace hap {

using Clock = std::chrono::steady_clock;

// Milliseconds from t0 to now.
inline double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Milliseconds between two points.
inline double MsBetween(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

}  // namespace hap
