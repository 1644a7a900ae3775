#include "services/server/worker_pool.h"

#include "absl/strings/str_cat.h"

namespace hap::svc {

WorkerPool::Ticket& WorkerPool::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = other.pool_;
    running_ = other.running_;
    other.pool_ = nullptr;
    other.running_ = false;
  }
  return *this;
}

void WorkerPool::Ticket::Reset() {
  if (pool_ != nullptr) pool_->Release(running_);
  pool_ = nullptr;
  running_ = false;
}

WorkerPool::WorkerPool(int workers, int queue_length)
    : workers_(workers), queue_length_(queue_length) {
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { Loop(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

absl::StatusOr<WorkerPool::Ticket> WorkerPool::Admit() {
  std::lock_guard<std::mutex> lock(mu_);
  if (admitted_ >= workers_ + queue_length_) {
    ++rejected_;
    return absl::ResourceExhaustedError(
        absl::StrCat("server busy: ", workers_, " requests running and ", queue_length_,
                     " queued (limits --max-concurrent and --queue-length)"));
  }
  ++admitted_;
  return Ticket(this);
}

void WorkerPool::Release(bool running) {
  std::lock_guard<std::mutex> lock(mu_);
  --admitted_;
  if (running) --running_;
}

void WorkerPool::Run(Ticket ticket, std::function<void(Ticket*)> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back(Item{std::move(ticket), std::move(task)});
  }
  cv_.notify_one();
}

void WorkerPool::Loop() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !items_.empty(); });
      if (items_.empty()) return;  // stop_ and nothing left to run
      item = std::move(items_.front());
      items_.pop_front();
      ++running_;
      item.ticket.running_ = true;
    }
    item.task(&item.ticket);
    item.ticket.Reset();  // unless the task released it already
  }
}

int WorkerPool::admitted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return admitted_;
}

int WorkerPool::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

int64_t WorkerPool::rejected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rejected_;
}

}  // namespace hap::svc
