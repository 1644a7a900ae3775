// Picks the compute backend a process runs on from a device name: `--device` / HAP_DEVICE of the
// services and hapctl. "cpu" is the CPU backend; "cuda" the CUDA backend (kernels/cuda), present
// when the build has it (HAP_CUDA) and usable where the CUDA runtime finds a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace hap {

// InvalidArgument for a name other than cpu/cuda; FailedPrecondition for cuda in a build
// without the CUDA backend or on a machine without a usable GPU.
absl::StatusOr<const Backend*> BackendForDevice(std::string_view device);

// The memory of the GPU `device` names, in bytes (cudaDeviceProp::totalGlobalMem; 0 on the
// emulation). FailedPrecondition for "cpu", or for "cuda" where BackendForDevice would refuse it.
absl::StatusOr<int64_t> DeviceMemoryBytes(std::string_view device);

// What `device` can be in this build ("cpu" or "cpu|cuda"), for help texts.
std::string DeviceChoices();

}  // namespace hap
