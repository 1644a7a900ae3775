// What the emulated backend (hap_cuda_emulated) counts of the GPU work it is given, for the
// structural tests (ctest -L cuda_structure): kernel launches and products, the two kinds of
// work a GPU step enqueues. Defined by the emulation only; a GPU build has no such counters.
#pragma once

#include <cstdint>

namespace hap::cuda::emulation {

// Kernel launches since the process started, failed ones included.
int64_t KernelLaunches();
// Matrix products (what cuBLAS runs on a GPU) since the process started.
int64_t Products();

}  // namespace hap::cuda::emulation
