// A non-owning view of a tensor: where its bytes are (host or device memory), their element
// type, the shape and the strides. The model hands these to a backend's ops; a backend checks
// dtype, device and layout and says so (InvalidArgument / Unimplemented) when it cannot take a
// view. Ops take contiguous views; a strided one is packed once by Backend::PlaceWeight. (Narrow
// over rows stays contiguous, e.g. the q rows of a fused QKV weight [3d, d]; a range of its
// columns is strided.)
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/dtype.h"

namespace hap {

enum class Device { kCpu, kCuda };

std::string_view DeviceName(Device device);

struct TensorView {
  TensorView() = default;
  TensorView(const void* data, DType dtype, Device device, std::vector<int64_t> shape,
             std::vector<int64_t> strides = {})
      : data(data),
        dtype(dtype),
        device(device),
        shape(std::move(shape)),
        strides(std::move(strides)) {}

  const void* data = nullptr;  // nullptr for an absent optional tensor (a bias)
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  std::vector<int64_t> shape;
  // Elements between consecutive indices of each dimension, one per dimension; empty means
  // row-major contiguous (the strides follow from the shape).
  std::vector<int64_t> strides;

  bool present() const { return data != nullptr; }
  int64_t numel() const;
  // The elements' bytes (what a contiguous copy holds).
  int64_t bytes() const { return numel() * static_cast<int64_t>(DTypeSize(dtype)); }
  // The bytes from `data` to one past the last element (bytes() when contiguous).
  int64_t extent_bytes() const;
  // Elements between consecutive indices of dimension `dim`.
  int64_t stride(int dim) const;
  // Row-major without gaps: what the ops take.
  bool contiguous() const;
  // Indices [begin, begin + length) of dimension `dim`, a view of the same memory: contiguous
  // when `dim` is the first dimension of a contiguous view, strided otherwise. OutOfRange when
  // the range or `dim` is outside the view.
  absl::StatusOr<TensorView> Narrow(int dim, int64_t begin, int64_t length) const;
  // The data as F32 elements. Only for F32 host views (the loader converts the small tensors
  // that ops read element by element: norms, biases, embeddings of the vision tower).
  const float* f32() const { return static_cast<const float*>(data); }
  // "BF16 [4096, 11008] on cpu" (a strided view adds "strides [11008, 1]"), for error messages.
  std::string Describe() const;
};

// Copies a host view's elements into `dst` (bytes() bytes) in row-major order: a strided view
// becomes contiguous. InvalidArgument for a device view or strides that are not positive.
absl::Status CopyToContiguous(const TensorView& view, void* dst);

}  // namespace hap
