#include "runtime/model/cancellation.h"

#include <utility>

namespace hap {
namespace {

thread_local const ScopedCancellation* g_current = nullptr;
thread_local const ScopedTurnHook* g_turn_hook = nullptr;

}  // namespace

ScopedCancellation::ScopedCancellation(std::function<bool()> cancelled)
    : cancelled_(std::move(cancelled)), previous_(g_current) {
  g_current = this;
}

ScopedCancellation::~ScopedCancellation() { g_current = previous_; }

bool CancellationRequested() { return g_current != nullptr && g_current->cancelled_(); }

ScopedTurnHook::ScopedTurnHook(std::function<void(int64_t rows)> hook)
    : hook_(std::move(hook)), previous_(g_turn_hook) {
  g_turn_hook = this;
}

ScopedTurnHook::~ScopedTurnHook() { g_turn_hook = previous_; }

void BeforeLayer(int64_t rows) {
  if (g_turn_hook != nullptr) g_turn_hook->hook_(rows);
}

}  // namespace hap
