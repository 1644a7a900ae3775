// SIGTERM/SIGINT as an event a thread can wait for. A handler (not a blocked mask) is used
// because libraries start threads before main() (OpenBLAS does), and a signal delivered to one
// of those with the default action would kill the process without draining.
#pragma once

#include <chrono>

namespace hap {

class StopSignals {
 public:
  // Installs the handlers once per process; later calls do nothing.
  static void Install();
  // Waits until SIGTERM or SIGINT arrived (true) or the timeout passed (false). Once a signal
  // arrived, every later call returns true at once.
  static bool Wait(std::chrono::milliseconds timeout);
  // The signal that arrived, 0 if none.
  static int received();
};

}  // namespace hap
