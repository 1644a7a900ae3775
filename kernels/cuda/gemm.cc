#include "kernels/cuda/gemm.h"

#include <string>

#include "kernels/cuda/add.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/device_memory.h"

namespace hap::cuda {

KernelStatus Gemm::Create(Stream stream, std::unique_ptr<Gemm>* out) {
  std::unique_ptr<Gemm> g(new Gemm());
  g->stream_ = stream;
  KernelStatus s = internal::CreateBlas(stream, &g->blas_);
  if (!s.ok) return s;
  *out = std::move(g);
  return KernelStatus::Ok();
}

Gemm::~Gemm() {
  if (scratch_ != nullptr) DeviceFree(scratch_);
  if (blas_ != nullptr) internal::DestroyBlas(blas_);
}

KernelStatus Gemm::EnsureScratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return KernelStatus::Ok();
  // The previous scratch may still be read by a product queued on the stream.
  KernelStatus s = Synchronize(stream_);
  if (!s.ok) return s;
  if (scratch_ != nullptr) DeviceFree(scratch_);
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  s = DeviceAlloc(&scratch_, bytes);
  if (s.ok) scratch_bytes_ = bytes;
  return s;
}

KernelStatus Gemm::Linear(const float* x, const void* w, ElemType w_type, const float* bias,
                          float* y, int m, int n, int k) {
  if (m < 0 || n <= 0 || k <= 0) {
    return KernelStatus::Error("Linear: m=" + std::to_string(m) + " n=" + std::to_string(n) +
                               " k=" + std::to_string(k));
  }
  if (m == 0) return KernelStatus::Ok();
  const void* xin = x;
  if (w_type != ElemType::kF32) {
    KernelStatus s = EnsureScratch(static_cast<size_t>(m) * k * sizeof(uint16_t));
    if (!s.ok) return s;
    s = RoundF32To(w_type, x, scratch_, int64_t{m} * k, stream_);
    if (!s.ok) return s;
    xin = scratch_;
  }
  KernelStatus s = internal::BlasGemm(blas_, xin, w, w_type, y, m, n, k, stream_);
  if (!s.ok || bias == nullptr) return s;
  return AddBias(y, bias, m, n, stream_);
}

}  // namespace hap::cuda
