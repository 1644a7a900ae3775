// What the emulated backend (hap_cuda_emulated) counts of the GPU work it is given, for the
// structural tests (ctest -L cuda_structure): kernel launches and products, the two kinds of
// work a GPU step enqueues, and the device allocations and frees under them. Defined by the
// emulation only; a GPU build has no such counters.
#pragma once

#include <cstdint>

namespace hap::cuda::emulation {

// Kernel launches since the process started, failed ones included.
int64_t KernelLaunches();
// Matrix products (what cuBLAS runs on a GPU) since the process started.
int64_t Products();
// Device allocations and frees (cudaMalloc and cudaFree on a GPU) since the process started.
int64_t DeviceAllocations();
int64_t DeviceFrees();

}  // namespace hap::cuda::emulation
