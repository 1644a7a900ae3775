// The emulation's register of device memory, for its pieces that map memory of their own as
// device memory (ipc_emulated.cc): IsDeviceRange then accepts it, as the ops require.
#pragma once

#include <cstddef>

namespace hap::cuda::emulation {

void AddDeviceRange(void* ptr, size_t bytes);
void RemoveDeviceRange(void* ptr);

}  // namespace hap::cuda::emulation
