#include "base/tensor.h"

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

int64_t TensorView::stride(int dim) const {
  int64_t s = 1;
  for (size_t i = static_cast<size_t>(dim) + 1; i < shape.size(); ++i) s *= shape[i];
  return s;
}

std::string TensorView::Describe() const {
  return absl::StrCat(AsAbsl(DTypeName(dtype)), " [", absl::StrJoin(shape, ", "), "] on ",
                      AsAbsl(DeviceName(device)));
}

}  // namespace hap
