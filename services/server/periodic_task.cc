#include "services/server/periodic_task.h"

#include <utility>

namespace hap::svc {

PeriodicTask::PeriodicTask(std::function<void()> task, std::chrono::milliseconds interval)
    : task_(std::move(task)), interval_(interval) {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      const auto next = std::chrono::steady_clock::now() + interval_;
      task_();
      lock.lock();
      cv_.wait_until(lock, next, [this] { return stop_; });
    }
  });
}

PeriodicTask::~PeriodicTask() { Stop(); }

void PeriodicTask::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace hap::svc
