// Cooperative cancellation of long work: a caller whose request went away (a service worker)
// installs a check for the current thread; the vision tower and the decoder poll it between
// layers and return CANCELLED.
#pragma once

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

}  // namespace hap
