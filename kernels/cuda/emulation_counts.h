// What the emulated backend (hap_cuda_emulated) counts of the GPU work it is given, for the
// structural tests (ctest -L cuda_structure): kernel launches and products, the two kinds of
// work a GPU step enqueues, and the device allocations and frees under them. Defined by the
// emulation only; a GPU build has no such counters.
#pragma once

#include <cstdint>

namespace hap::cuda::emulation {

// Kernel launches since the process started, failed ones included; those of one kernel
// (its __global__ function's name).
int64_t KernelLaunches();
int64_t KernelLaunches(const char* kernel);
// Matrix products (what cuBLAS runs on a GPU) since the process started.
int64_t Products();
// Device allocations and frees (cudaMalloc and cudaFree on a GPU) since the process started.
int64_t DeviceAllocations();
int64_t DeviceFrees();
// Host→device copies since the process started, and those of them from pageable memory (which
// a GPU's driver stages through page-locked memory of its own before the copy) rather than
// from HostAlloc's.
int64_t HostToDeviceCopies();
int64_t StagedHostToDeviceCopies();
// Device→host copies since the process started. Each one waits for its stream, so this counts
// the backend's syncs: the tests pin down a prefill's and a decode step's with it. And the bytes
// they moved, so a test can tell an id from a row of logits.
int64_t DeviceToHostCopies();
int64_t DeviceToHostBytes();

}  // namespace hap::cuda::emulation
