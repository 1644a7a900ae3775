// A child process with its stdout read line by line (for "listening on HOST:PORT" and "ready"
// lines), used by `hapctl up` and the end-to-end tests to run the service binaries.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace hap::sdk {

class ChildProcess {
 public:
  // Runs argv[0] (a path) with argv[1..]. stderr is inherited; stdout lines are kept and, with
  // `echo_prefix` non-empty, echoed to our stderr as "<prefix> line". The child gets SIGTERM if
  // this process dies.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::vector<std::string>& argv,
                                                             const std::string& echo_prefix);
  ~ChildProcess();  // Terminate(5 s) if still running

  pid_t pid() const { return pid_; }
  // The first stdout line (from the start) for which `match` is true.
  absl::StatusOr<std::string> WaitForLine(const std::function<bool(const std::string&)>& match,
                                          std::chrono::milliseconds timeout);
  // Every stdout line, once the child closed its stdout (DeadlineExceeded if it did not in time).
  absl::StatusOr<std::vector<std::string>> ReadAll(std::chrono::milliseconds timeout);
  void Signal(int sig);
  // The exit code (128 + signal when killed by one), or nullopt when still running at the timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // SIGTERM, then SIGKILL after `grace`. Returns the exit code.
  int Terminate(std::chrono::milliseconds grace);
  bool running();

 private:
  ChildProcess() = default;
  void ReadLoop(int fd);

  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::string echo_prefix_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
  bool eof_ = false;
};

// The port in a "... listening on HOST:PORT" line, or 0.
int ParseListeningPort(const std::string& line);

}  // namespace hap::sdk
