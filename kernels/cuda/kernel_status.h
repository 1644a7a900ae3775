// The error value kernels/cuda returns: plain C++ (no Abseil), since nvcc compiles the files
// that produce it. The CUDA backend turns it into an absl::Status (kernels/cuda/cuda_backend.cc).
#pragma once

#include <string>
#include <utility>

namespace hap::cuda {

struct KernelStatus {
  bool ok = true;
  bool out_of_memory = false;  // an allocation the device could not satisfy
  std::string message;         // which kernel or call failed, and why

  static KernelStatus Ok() { return {}; }
  static KernelStatus Error(std::string message) { return {false, false, std::move(message)}; }
  static KernelStatus OutOfMemory(std::string message) {
    return {false, true, std::move(message)};
  }
};

}  // namespace hap::cuda
