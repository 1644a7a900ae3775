// A function run on its own thread at once and then every interval, until Stop (or
// destruction). A run in progress finishes before Stop returns.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace hap::svc {

class PeriodicTask {
 public:
  PeriodicTask(std::function<void()> task, std::chrono::milliseconds interval);
  ~PeriodicTask();  // Stop()
  PeriodicTask(const PeriodicTask&) = delete;
  PeriodicTask& operator=(const PeriodicTask&) = delete;

  // Idempotent.
  void Stop();

 private:
  const std::function<void()> task_;
  const std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace hap::svc
