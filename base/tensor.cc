#include "base/tensor.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/string_view_compat.h"

namespace hap {

std::string_view DeviceName(Device device) {
  return device == Device::kCpu ? "cpu" : "cuda";
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

int64_t ContiguousStride(const std::vector<int64_t>& shape, size_t dim) {
  int64_t s = 1;
  for (size_t i = dim + 1; i < shape.size(); ++i) s *= shape[i];
  return s;
}

// Copies the elements of dimensions >= dim, starting at `src`, to `dst`; returns the end of dst.
uint8_t* CopyDims(const TensorView& v, size_t dim, const uint8_t* src, uint8_t* dst) {
  const int64_t elem = static_cast<int64_t>(DTypeSize(v.dtype));
  if (dim == v.shape.size()) {
    std::memcpy(dst, src, static_cast<size_t>(elem));
    return dst + elem;
  }
  const int64_t step = v.stride(static_cast<int>(dim)) * elem;
  // The innermost dimensions that are contiguous go in one memcpy.
  if (dim + 1 == v.shape.size() && v.stride(static_cast<int>(dim)) == 1) {
    const int64_t run = v.shape[dim] * elem;
    std::memcpy(dst, src, static_cast<size_t>(run));
    return dst + run;
  }
  for (int64_t i = 0; i < v.shape[dim]; ++i) dst = CopyDims(v, dim + 1, src + i * step, dst);
  return dst;
}

}  // namespace

int64_t TensorView::stride(int dim) const {
  if (!strides.empty()) return strides[static_cast<size_t>(dim)];
  return ContiguousStride(shape, static_cast<size_t>(dim));
}

bool TensorView::contiguous() const {
  if (strides.empty()) return true;
  if (strides.size() != shape.size()) return false;
  for (size_t d = 0; d < shape.size(); ++d) {
    // A dimension of one index has no step to take: its stride does not matter.
    if (shape[d] > 1 && strides[d] != ContiguousStride(shape, d)) return false;
  }
  return true;
}

int64_t TensorView::extent_bytes() const {
  if (numel() == 0) return 0;
  int64_t last = 0;  // the offset of the last element, in elements
  for (size_t d = 0; d < shape.size(); ++d) last += (shape[d] - 1) * stride(static_cast<int>(d));
  return (last + 1) * static_cast<int64_t>(DTypeSize(dtype));
}

absl::StatusOr<TensorView> TensorView::Narrow(int dim, int64_t begin, int64_t length) const {
  if (dim < 0 || static_cast<size_t>(dim) >= shape.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("Narrow: dimension ", dim, " of a ", shape.size(), "-d view ", Describe()));
  }
  const int64_t size = shape[static_cast<size_t>(dim)];
  if (begin < 0 || length < 0 || begin > size || length > size - begin) {
    return absl::OutOfRangeError(absl::StrCat("Narrow: indices [", begin, ", ", begin + length,
                                              ") of dimension ", dim, " of ", Describe()));
  }
  TensorView out = *this;
  out.strides.resize(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) out.strides[d] = stride(static_cast<int>(d));
  out.shape[static_cast<size_t>(dim)] = length;
  if (data != nullptr) {
    out.data = static_cast<const uint8_t*>(data) +
               begin * stride(dim) * static_cast<int64_t>(DTypeSize(dtype));
  }
  if (out.contiguous()) out.strides.clear();
  return out;
}

std::string TensorView::Describe() const {
  std::string layout;
  if (!contiguous()) layout = absl::StrCat(" strides [", absl::StrJoin(strides, ", "), "]");
  return absl::StrCat(AsAbsl(DTypeName(dtype)), " [", absl::StrJoin(shape, ", "), "]", layout,
                      " on ", AsAbsl(DeviceName(device)));
}

absl::Status CopyToContiguous(const TensorView& view, void* dst) {
  if (view.device != Device::kCpu) {
    return absl::InvalidArgumentError("CopyToContiguous: " + view.Describe() +
                                      " is not in host memory");
  }
  if (!view.strides.empty() && view.strides.size() != view.shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat("CopyToContiguous: ", view.strides.size(),
                                                   " strides for ", view.shape.size(),
                                                   " dimensions"));
  }
  for (size_t d = 0; d < view.shape.size(); ++d) {
    if (view.stride(static_cast<int>(d)) <= 0 && view.shape[d] > 1) {
      return absl::InvalidArgumentError("CopyToContiguous: strides of " + view.Describe() +
                                        " must be positive");
    }
  }
  if (view.numel() == 0) return absl::OkStatus();
  if (view.contiguous()) {
    std::memcpy(dst, view.data, static_cast<size_t>(view.bytes()));
    return absl::OkStatus();
  }
  CopyDims(view, 0, static_cast<const uint8_t*>(view.data), static_cast<uint8_t*>(dst));
  return absl::OkStatus();
}

}  // namespace hap
