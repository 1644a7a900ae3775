#include "runtime/model/cancellation.h"

namespace hap {
namespace {

thread_local const ScopedCancellation* g_current = nullptr;

}  // namespace

ScopedCancellation::ScopedCancellation(std::function<bool()> cancelled)
    : cancelled_(std::move(cancelled)), previous_(g_current) {
  g_current = this;
}

ScopedCancellation::~ScopedCancellation() { g_current = previous_; }

bool CancellationRequested() { return g_current != nullptr && g_current->cancelled_(); }

}  // namespace hap
