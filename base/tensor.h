// A non-owning view of a dense tensor: where its bytes are (host or device memory), their
// element type and the shape. The model hands these to a backend's ops; a backend checks dtype
// and device and says so (InvalidArgument / Unimplemented) when it cannot take a view.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"

namespace hap {

enum class Device { kCpu, kCuda };

std::string_view DeviceName(Device device);

struct TensorView {
  const void* data = nullptr;  // nullptr for an absent optional tensor (a bias)
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  std::vector<int64_t> shape;  // row-major and contiguous: strides follow from the shape

  bool present() const { return data != nullptr; }
  int64_t numel() const;
  int64_t bytes() const { return numel() * static_cast<int64_t>(DTypeSize(dtype)); }
  // Elements between consecutive indices of dimension `dim` (row-major contiguous).
  int64_t stride(int dim) const;
  // The data as F32 elements. Only for F32 host views (the loader converts the small tensors
  // that ops read element by element: norms, biases, embeddings of the vision tower).
  const float* f32() const { return static_cast<const float*>(data); }
  // "BF16 [4096, 11008] on cpu", for error messages.
  std::string Describe() const;
};

}  // namespace hap
