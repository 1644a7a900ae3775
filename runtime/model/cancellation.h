// Cooperative cancellation and scheduling of long work. A caller whose request went away (a
// service worker) installs a check for the current thread; the vision tower and the decoder poll
// it between layers and return CANCELLED. A caller that shares the compute with other requests
// installs a turn hook; the decoder calls it before each layer with the rows that layer will
// process, and the hook may hand the compute to others there (TurnBudget, base/compute_gate.h)
// and return once it is back.
#pragma once

#include <cstdint>
#include <functional>

namespace hap {

// While alive, CancellationRequested() on this thread asks `cancelled`. Scopes nest.
class ScopedCancellation {
 public:
  explicit ScopedCancellation(std::function<bool()> cancelled);
  ~ScopedCancellation();
  ScopedCancellation(const ScopedCancellation&) = delete;
  ScopedCancellation& operator=(const ScopedCancellation&) = delete;

 private:
  friend bool CancellationRequested();
  std::function<bool()> cancelled_;
  const ScopedCancellation* previous_;
};

// True when the innermost ScopedCancellation of this thread says so; false without one.
bool CancellationRequested();

// While alive, BeforeLayer(rows) on this thread calls `hook(rows)`. Scopes nest.
class ScopedTurnHook {
 public:
  explicit ScopedTurnHook(std::function<void(int64_t rows)> hook);
  ~ScopedTurnHook();
  ScopedTurnHook(const ScopedTurnHook&) = delete;
  ScopedTurnHook& operator=(const ScopedTurnHook&) = delete;

 private:
  friend void BeforeLayer(int64_t rows);
  std::function<void(int64_t rows)> hook_;
  const ScopedTurnHook* previous_;
};

// The innermost ScopedTurnHook of this thread, if any, with the rows the next layer processes.
void BeforeLayer(int64_t rows);

}  // namespace hap
