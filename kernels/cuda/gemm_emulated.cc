// The emulation's product: the CPU's Linear on the same operands (x already in the weights'
// type, so each product of two narrow values is exact in F32, as on the GPU).
#include <atomic>
#include <vector>

#include "base/dtype.h"
#include "base/tensor.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/emulation_counts.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/simt/simt.h"

namespace hap::cuda {
namespace {

std::atomic<int64_t> g_products{0};

}  // namespace

int64_t emulation::Products() { return g_products.load(); }
int64_t emulation::KernelLaunches() { return static_cast<int64_t>(simt::LaunchCount()); }

namespace internal {

KernelStatus CreateBlas(Stream, void** blas) {
  *blas = nullptr;
  return KernelStatus::Ok();
}

void DestroyBlas(void*) {}

KernelStatus BlasGemm(void*, const void* x, const void* w, ElemType type, float* y, int m, int n,
                      int k, Stream) {
  g_products.fetch_add(1);
  const DType dtype = type == ElemType::kBF16  ? DType::kBF16
                      : type == ElemType::kF16 ? DType::kF16
                                               : DType::kF32;
  const size_t esize = DTypeSize(dtype);
  if (!IsDeviceRange(x, esize * m * k) || !IsDeviceRange(w, esize * n * k) ||
      !IsDeviceRange(y, sizeof(float) * m * n)) {
    return KernelStatus::Error("Linear: an operand is not device memory");
  }
  std::vector<float> xf(static_cast<size_t>(m) * k);
  ConvertToF32(dtype, x, xf.data(), xf.size());
  const TensorView wv{w, dtype, Device::kCpu, {n, k}};
  absl::Status s = cpu::Linear(xf.data(), wv, nullptr, y, m, LinearRows::kIndependent);
  return s.ok() ? KernelStatus::Ok() : KernelStatus::Error("Linear: " + std::string(s.message()));
}

}  // namespace internal
}  // namespace hap::cuda
