#include "runtime/device/device_backend.h"

#include <string>

#if defined(HAP_HAS_CUDA)
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_memory.h"
#endif

namespace hap {

absl::StatusOr<const Backend*> BackendForDevice(std::string_view device) {
  if (device.empty() || device == "cpu") return &CpuBackend();
  if (device != "cuda") {
    return absl::InvalidArgumentError("unknown device '" + std::string(device) +
                                      "' (expected " + DeviceChoices() + ")");
  }
#if defined(HAP_HAS_CUDA)
  absl::StatusOr<const Backend*> cuda = GetCudaBackend();
  if (!cuda.ok()) {
    return absl::FailedPreconditionError("--device cuda: " + std::string(cuda.status().message()));
  }
  return cuda;
#else
  return absl::FailedPreconditionError(
      "--device cuda: this build has no CUDA backend (configure with -DHAP_CUDA=ON where nvcc "
      "is installed, or use the CUDA image)");
#endif
}

absl::StatusOr<int64_t> DeviceMemoryBytes(std::string_view device) {
  if (device != "cuda") {
    return absl::FailedPreconditionError("device '" + std::string(device) +
                                         "' has no GPU memory of its own");
  }
  absl::StatusOr<const Backend*> backend = BackendForDevice(device);
  if (!backend.ok()) return backend.status();
#if defined(HAP_HAS_CUDA)
  char name[256];
  int64_t total = 0;
  const cuda::KernelStatus st = cuda::DeviceDescription(name, sizeof name, &total);
  if (!st.ok) return absl::InternalError("--device cuda: " + st.message);
  return total;
#else
  return absl::FailedPreconditionError("--device cuda: this build has no CUDA backend");
#endif
}

std::string DeviceChoices() {
#if defined(HAP_HAS_CUDA)
  return "cpu|cuda";
#else
  return "cpu";
#endif
}

}  // namespace hap
