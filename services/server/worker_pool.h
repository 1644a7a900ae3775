// Admission control and the worker threads that run requests. At most `workers` requests run
// at once and `queue_length` more wait; past that Admit() says RESOURCE_EXHAUSTED, so a burst
// is refused up front instead of piling up.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace hap::svc {

class WorkerPool {
 public:
  // A place in the pool: held from admission until the request's task returns or releases it
  // (or the ticket is dropped without running anything).
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept : pool_(other.pool_), running_(other.running_) {
      other.pool_ = nullptr;
      other.running_ = false;
    }
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { Reset(); }
    void Reset();
    bool valid() const { return pool_ != nullptr; }

   private:
    friend class WorkerPool;
    explicit Ticket(WorkerPool* pool) : pool_(pool) {}
    WorkerPool* pool_ = nullptr;
    bool running_ = false;  // its task is running: releasing it ends that too
  };

  WorkerPool(int workers, int queue_length);
  ~WorkerPool();  // runs what is queued, then joins the workers
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // ResourceExhausted (with the limits in the message) when workers + queue_length are taken.
  absl::StatusOr<Ticket> Admit();
  // Queues `task`, which gets the ticket: it should Reset() it before it answers its call, so a
  // client that has seen the answer finds the place free again (the ticket is released when the
  // task returns otherwise).
  void Run(Ticket ticket, std::function<void(Ticket* ticket)> task);

  int admitted() const;  // tickets alive
  int running() const;
  int queued() const { return admitted() - running(); }
  int64_t rejected() const;

 private:
  struct Item {
    Ticket ticket;
    std::function<void(Ticket*)> task;
  };
  void Release(bool running);
  void Loop();

  const int workers_, queue_length_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  int admitted_ = 0;
  int running_ = 0;
  int64_t rejected_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace hap::svc
