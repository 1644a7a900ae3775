// The emulation records no profile (kernels/cuda/op_profile.h): its launches complete on the
// host before they return, so there is no device time apart from host time to report.
#include "kernels/cuda/op_profile.h"

namespace hap::cuda::profile {

void Enable() {}
KernelStatus Take(Summary* out) {
  *out = Summary();
  return KernelStatus::Ok();
}
bool Enabled() { return false; }
void Begin(Stream) {}
void End(Stream, const char*) {}

}  // namespace hap::cuda::profile
